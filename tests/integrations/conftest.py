"""The middleware tests' fixtures: a real server per test (``serve``), its flavour (the SDK's
``MCPServer`` or FastMCP) and response mode, and HTTP clients; the helpers are in
``_helpers.py``."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from mcp_cancellation import CancellationRegistry
from mcp_cancellation import signals as sig
from mcp_cancellation.integrations._middleware import CancellationMiddleware
from mcp_cancellation.storage._memory import MemoryStorage

from ..support import UvicornThread
from ._helpers import (
    STREAM_CANCEL_TIMEOUT,
    Harness,
    Serve,
    ToolLog,
    build_fastmcp_app,
    build_sdk_app,
)


@pytest.fixture
def serve() -> Iterator[Serve]:
    """Start servers: ``serve(flavour="sdk"|"fastmcp", json_response=..., **middleware)``;
    ``server=`` holds uvicorn options (such as ``loop`` and ``http``)."""
    stack = contextlib.ExitStack()

    def start(
        flavour: str = "sdk",
        *,
        json_response: bool = False,
        registry: CancellationRegistry | None = None,
        stateless: bool = True,
        server: dict[str, Any] | None = None,
        event_store: Any = None,
        **options: Any,
    ) -> Harness:
        log = ToolLog()
        registry = registry or CancellationRegistry(MemoryStorage(), janitor_interval=None)
        options.setdefault("stream_cancel_timeout", STREAM_CANCEL_TIMEOUT)
        if flavour == "sdk":
            app: Any = CancellationMiddleware(
                build_sdk_app(
                    log,
                    json_response=json_response,
                    stateless_http=stateless,
                    event_store=event_store,
                ),
                registry=registry,
                **options,
            )
        elif flavour == "fastmcp":
            from starlette.middleware import Middleware

            app = build_fastmcp_app(
                log,
                json_response=json_response,
                middleware=[Middleware(CancellationMiddleware, registry=registry, **options)],
                stateless_http=stateless,
            )
        else:  # pragma: no cover
            raise ValueError(flavour)
        # uvicorn's own proxy-header handling (on by default for 127.0.0.1) would rewrite
        # scope["client"] before the middleware sees it; the middleware's is under test.
        uvicorn = UvicornThread(app, proxy_headers=False, **(server or {}))
        harness = Harness(uvicorn, registry, log)

        def record(sender: Any, **kwargs: Any) -> None:
            harness.cancellations.append(kwargs)

        stack.enter_context(sig.request_cancelled.connected_to(record, sender=registry))
        stack.enter_context(uvicorn)  # started now, stopped after the test
        return harness

    with stack:
        yield start


@pytest.fixture(params=["sdk", "fastmcp"])
def flavour(request: pytest.FixtureRequest) -> str:
    """The server a test runs against: the mcp SDK's app, then FastMCP's."""
    name: str = request.param
    return name


@pytest.fixture(params=[pytest.param(False, id="sse"), pytest.param(True, id="json")])
def json_response(request: pytest.FixtureRequest) -> bool:
    """How the server answers a call: an SSE stream, then one JSON body."""
    value: bool = request.param
    return value


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    """A raw HTTP client from 127.0.0.1."""
    async with httpx.AsyncClient(timeout=20) as client:
        yield client


@pytest.fixture
async def other_http() -> AsyncIterator[httpx.AsyncClient]:
    """A raw HTTP client from another address, 127.0.0.2 (another ``ip:`` scope)."""
    transport = httpx.AsyncHTTPTransport(local_address="127.0.0.2")
    async with httpx.AsyncClient(timeout=20, transport=transport) as client:
        yield client
