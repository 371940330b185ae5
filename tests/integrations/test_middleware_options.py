"""The middleware's options are validated at construction, its caller scope agrees
with ``scope_of()``, and the ASGI lifespan runs the registry's janitor."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_cancellation import (
    CancellationMiddleware,
    CancellationRegistry,
    ConfigurationError,
    MemoryStorage,
)

from ..support import UvicornThread
from ._helpers import ToolLog, build_sdk_app

pytestmark = pytest.mark.e2e


Scope = dict[str, Any]


async def _noop_app(scope: Any, receive: Any, send: Any) -> None:  # pragma: no cover
    return None


@pytest.mark.parametrize(
    "options",
    [
        {"trusted_proxies": ["not-a-network"]},
        {"trusted_proxies": ["10.0.0.0/33"]},
        {"stream_cancel_timeout": -1},
        {"stream_cancel_timeout": float("inf")},
        {"stream_cancel_timeout": "10"},
        {"max_body_bytes": 0},
        {"max_body_bytes": 1.5},
        {"path": "mcp"},
        {"session_resolver": "not callable"},
        {"disconnect_cancels": "never"},
        {"disconnect_cancels": True},
    ],
)
def test_bad_configuration_is_rejected_at_construction(options: dict[str, Any]) -> None:
    registry = CancellationRegistry(MemoryStorage(), janitor_interval=None)
    with pytest.raises(ConfigurationError):
        CancellationMiddleware(_noop_app, registry=registry, **options)


def test_trusted_proxies_normalised() -> None:
    registry = CancellationRegistry(MemoryStorage(), janitor_interval=None)
    middleware = CancellationMiddleware(
        _noop_app, registry=registry, trusted_proxies=["127.0.0.1", "10.1.2.3/8", "::1"]
    )
    assert middleware.trusted_proxies == ("127.0.0.1/32", "10.0.0.0/8", "::1/128")


@pytest.mark.parametrize(
    "client",
    [
        ("127.0.0.1", 1),
        ("::ffff:192.0.2.7", 2),
        ("2001:db8:1:2:3:4:5:6", 3),
        ("fe80::1%eth0", 4),
        ("not an address", 5),
        None,
    ],
)
@pytest.mark.parametrize("trusted", [(), ("127.0.0.1",)])
def test_caller_scope_matches_scope_of(
    client: tuple[str, int] | None, trusted: tuple[str, ...]
) -> None:
    from mcp_cancellation import scope_of

    registry = CancellationRegistry(MemoryStorage(), janitor_interval=None)
    middleware = CancellationMiddleware(_noop_app, registry=registry, trusted_proxies=trusted)
    scope: Scope = {
        "type": "http",
        "client": client,
        "headers": [(b"x-forwarded-for", b"198.51.100.9")],
    }
    assert middleware.caller_scope(dict(scope)) == scope_of(scope, trusted_proxies=trusted)


def test_lifespan_starts_and_stops_the_janitor() -> None:
    registry = CancellationRegistry(MemoryStorage(), janitor_interval=30)
    app = CancellationMiddleware(build_sdk_app(ToolLog(), json_response=True), registry=registry)
    server = UvicornThread(app)
    with server:
        assert registry.janitor_running
    assert not registry.janitor_running
