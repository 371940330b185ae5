"""The public names DESIGN.md promises, pinned: mcp_cancellation.__all__, the signals, the
exception tree, and the argument order of the registry's methods."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import mcp_cancellation
from mcp_cancellation import signals

# DESIGN.md "Public API": every one importable from mcp_cancellation itself.
DESIGN_NAMES = [
    "CancellationRegistry",
    "MemoryStorage",
    "RedisStorage",
    "CleanupResult",
    "CancellationMiddleware",
    "scope_of",
    "client_bucket",
    "sanitize_reason",
    "cancelled",
    "raise_if_cancelled",
    "CancellationError",
    "InvalidRequestId",
    "ConfigurationError",
    "CancellationLimitReached",
    "RequestCancelled",
    "StorageUnavailable",
    "REQUEST_CANCELLED",
]

API_DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def documented(name: str) -> bool:
    """Whether docs/api.md describes *name* (written as code: `name`, `name(` ...)."""
    return re.search(rf"`{re.escape(name)}[`(\[. ]", API_DOC.read_text()) is not None


def test_exported_members_are_exactly_those_docs_api_lists() -> None:
    text = API_DOC.read_text()
    table = text.split("<!-- exported-names -->")[1].split("<!-- /exported-names -->")[0]
    listed = re.findall(r"^\| `([A-Za-z_]+)` \|", table, re.M)
    assert sorted(listed) == sorted(mcp_cancellation.__all__)
    assert len(mcp_cancellation.__all__) <= 20


def test_all_has_no_repeats() -> None:
    assert len(set(mcp_cancellation.__all__)) == len(mcp_cancellation.__all__)


@pytest.mark.parametrize("name", DESIGN_NAMES)
def test_design_names_are_exported(name: str) -> None:
    assert name in mcp_cancellation.__all__


@pytest.mark.parametrize("name", mcp_cancellation.__all__)
def test_every_exported_name_resolves_and_is_documented(name: str) -> None:
    assert getattr(mcp_cancellation, name) is not None
    assert documented(name), f"docs/api.md does not describe {name}"


def test_from_import_star_style_access() -> None:
    from mcp_cancellation import CancellationRegistry, cancelled, raise_if_cancelled

    assert callable(cancelled)
    assert callable(raise_if_cancelled)
    assert inspect.isclass(CancellationRegistry)


def test_unknown_attribute_raises_attribute_error() -> None:
    with pytest.raises(AttributeError):
        _ = mcp_cancellation.NoSuchThing


@pytest.mark.parametrize("name", signals.__all__)
def test_every_signal_is_documented(name: str) -> None:
    assert documented(name), f"docs/api.md does not describe signals.{name}"


def test_signals_have_their_dotted_names() -> None:
    for name in signals.__all__:
        if name != "namespace":
            assert getattr(signals, name) is signals.namespace[name.replace("_", ".", 1)]


def test_exception_tree() -> None:
    m = mcp_cancellation
    for name in [
        "InvalidRequestId",
        "ConfigurationError",
        "CancellationLimitReached",
        "RequestCancelled",
        "StorageUnavailable",
    ]:
        assert issubclass(getattr(m, name), m.CancellationError)
    assert issubclass(m.CancellationError, Exception)
    assert issubclass(m.InvalidRequestId, ValueError)
    assert m.REQUEST_CANCELLED == -32800
    assert m.RequestCancelled.code == -32800


def _params(method: object) -> list[str]:
    return [p for p in inspect.signature(method).parameters if p != "self"]  # type: ignore[arg-type]


def test_argument_order() -> None:
    cls = mcp_cancellation.CancellationRegistry
    assert _params(cls.cancel)[:3] == ["request_id", "reason", "scope"]
    assert _params(cls.cancel_in_flight)[:3] == ["request_id", "reason", "scope"]
    for name in ["is_cancelled", "reason", "clear", "track", "untrack", "in_flight", "request"]:
        assert _params(getattr(cls, name))[:2] == ["request_id", "scope"], name
    assert _params(cls.cleanup) == ["ttl"]
    signature = inspect.signature(cls.cancel)
    assert signature.parameters["scope"].default == "global"
    assert signature.parameters["reason"].default is None


def test_limits_are_keyword_only() -> None:
    signature = inspect.signature(mcp_cancellation.CancellationRegistry)
    for name in ["max_rows", "max_rows_per_scope", "ttl", "janitor_interval"]:
        assert signature.parameters[name].kind is inspect.Parameter.KEYWORD_ONLY
    assert next(iter(signature.parameters)) == "storage"


def test_py_typed_is_shipped() -> None:
    assert mcp_cancellation.__file__ is not None
    from pathlib import Path

    assert (Path(mcp_cancellation.__file__).parent / "py.typed").is_file()


# The public modules (issue 65): every other module is private (``_``-prefixed), and the
# names they export stay few. A new public module or name is a decision, made here.
PUBLIC_MODULES = {
    "mcp_cancellation",
    "mcp_cancellation.admin",
    "mcp_cancellation.dashboards",
    "mcp_cancellation.integrations",
    "mcp_cancellation.integrations.fastmcp",
    "mcp_cancellation.logs",
    "mcp_cancellation.scope",
    "mcp_cancellation.signals",
    "mcp_cancellation.simulate",
    "mcp_cancellation.storage",
    "mcp_cancellation.storage.redis",
    "mcp_cancellation.telemetry",
    "mcp_cancellation.telemetry.otel",
    "mcp_cancellation.telemetry.prometheus",
}


def _public_modules() -> list[str]:
    import pkgutil

    names = ["mcp_cancellation"]
    for info in pkgutil.walk_packages(mcp_cancellation.__path__, "mcp_cancellation."):
        parts = info.name.split(".")[1:]
        if not any(part.startswith("_") for part in parts):
            names.append(info.name)
    return names


def test_public_modules_are_the_listed_few() -> None:
    assert set(_public_modules()) <= PUBLIC_MODULES | {"mcp_cancellation.tasks"}
    assert len(_public_modules()) <= 15


def test_public_names_stay_few_and_resolve() -> None:
    import importlib

    total = 0
    for name in _public_modules():
        module = importlib.import_module(name)
        exported = module.__all__
        assert len(set(exported)) == len(exported), name
        for attribute in exported:
            assert hasattr(module, attribute), f"{name}.{attribute}"
        total += len(exported)
    assert total <= 120
