"""The public names DESIGN.md promises, pinned: mcp_cancellation.__all__, the signals, the
exception tree, and the argument order of the registry's methods."""

from __future__ import annotations

import importlib.util
import inspect

import pytest

import mcp_cancellation
from mcp_cancellation import signals

ALL = [
    "REQUEST_CANCELLED",
    "CancellationError",
    "CancellationLimitReached",
    "CancellationMiddleware",
    "CancellationRegistry",
    "CleanupResult",
    "ConfigurationError",
    "InvalidRequestId",
    "MemoryStorage",
    "RedisStorage",
    "RequestCancelled",
    "RequestContext",
    "RequestToken",
    "Storage",
    "StorageStats",
    "TableSummary",
    "StorageUnavailable",
    "__version__",
    "cancelled",
    "client_bucket",
    "current_token",
    "raise_if_cancelled",
    "sanitize_reason",
    "scope_kind",
    "scope_of",
]

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

# Names whose modules other work items provide, loaded lazily by the package.
LAZY = {
    "RedisStorage": "mcp_cancellation.storage.redis",
    "CancellationMiddleware": "mcp_cancellation.integrations.asgi",
}


def test_all_is_pinned() -> None:
    assert sorted(mcp_cancellation.__all__) == sorted(ALL)
    assert len(set(mcp_cancellation.__all__)) == len(mcp_cancellation.__all__)


@pytest.mark.parametrize("name", DESIGN_NAMES)
def test_design_names_are_exported(name: str) -> None:
    assert name in mcp_cancellation.__all__
    module = LAZY.get(name)
    if module is not None and importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not written yet")
    assert getattr(mcp_cancellation, name) is not None


@pytest.mark.parametrize("name", ALL)
def test_every_exported_name_resolves(name: str) -> None:
    module = LAZY.get(name)
    if module is not None and importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not written yet")
    assert hasattr(mcp_cancellation, name)


def test_from_import_star_style_access() -> None:
    from mcp_cancellation import CancellationRegistry, cancelled, raise_if_cancelled

    assert callable(cancelled)
    assert callable(raise_if_cancelled)
    assert inspect.isclass(CancellationRegistry)


def test_unknown_attribute_raises_attribute_error() -> None:
    with pytest.raises(AttributeError):
        _ = mcp_cancellation.NoSuchThing


def test_signals_module() -> None:
    assert sorted(signals.__all__) == [
        "cancellation_cleanup",
        "cancellation_evicted",
        "cancellation_rejected",
        "namespace",
        "request_cancelled",
        "request_stopped",
        "storage_error",
    ]


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
