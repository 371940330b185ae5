"""Tool-side helpers: each way of making a cancelled tool answer -32800, on a real server."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import httpx
import pytest

from mcp_cancellation import (
    REQUEST_CANCELLED,
    CancellationMiddleware,
    CancellationRegistry,
    MemoryStorage,
    RequestCancelled,
    cancelled,
    raise_if_cancelled,
)
from mcp_cancellation.integrations._mcp_sdk import (
    CancellationServerMiddleware,
    cancellable,
    cancelled_error,
)

from ..jsonrpc import SSE_AND_JSON, call_body, cancel_body, final_message
from ..support import UvicornThread, async_wait_until
from ._helpers import ToolLog

pytestmark = pytest.mark.e2e

Start = Callable[[Any], str]


@pytest.fixture
def start() -> Iterator[Start]:
    servers: list[UvicornThread] = []

    def run(inner: Any) -> str:
        registry = CancellationRegistry(MemoryStorage(), janitor_interval=None)
        server = UvicornThread(
            CancellationMiddleware(inner, registry=registry), proxy_headers=False
        )
        server.start()
        servers.append(server)
        return server.url + "/mcp"

    yield run
    for server in servers:
        server.stop()


async def call_and_cancel(url: str, log: ToolLog, tool: str) -> dict[str, Any]:
    answers: list[httpx.Response] = []
    async with httpx.AsyncClient(timeout=20) as http:

        async def call() -> None:
            answers.append(
                await http.post(
                    url, json=call_body("t", tool, {"seconds": 30}), headers=SSE_AND_JSON
                )
            )

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await async_wait_until(lambda: bool(log.started()), within=10)
            answer = await http.post(url, json=cancel_body("t", "stop"), headers=SSE_AND_JSON)
            assert answer.status_code == 202
    return final_message(answers[0])


def test_cancelled_error_shape() -> None:
    error = cancelled_error("why")
    assert (error.code, error.message, error.data) == (
        REQUEST_CANCELLED,
        "Request cancelled",
        {"reason": "why"},
    )
    assert cancelled_error().data is None


async def test_sdk_sync_tool_with_cancellable(start: Start, json_response: bool) -> None:
    """A ``def`` tool runs in a worker thread; the context variable follows it there."""
    from mcp.server.mcpserver import MCPServer

    log = ToolLog()
    server = MCPServer("sync-tools", log_level="WARNING")

    @server.tool()
    @cancellable
    def blocking(seconds: float) -> str:
        log.mark("t", "started")
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            raise_if_cancelled()
            time.sleep(0.02)
        return "completed"

    url = start(server.streamable_http_app(stateless_http=True, json_response=json_response))
    answer = await call_and_cancel(url, log, "blocking")
    assert answer["error"] == {
        "code": -32800,
        "message": "Request cancelled",
        "data": {"reason": "stop"},
    }


def _server_middleware_app(log: ToolLog, log_level: Any) -> Any:
    """An MCPServer with :class:`CancellationServerMiddleware` and two undecorated tools:
    ``undecorated`` raises RequestCancelled once cancelled, ``failing`` a ValueError."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer(
        "server-middleware", log_level=log_level, middleware=[CancellationServerMiddleware()]
    )

    @server.tool()
    async def undecorated(seconds: float) -> str:
        log.mark("t", "started")
        while not cancelled():  # noqa: ASYNC110 - the flag is flipped by another request
            await anyio.sleep(0.02)
        raise RequestCancelled("stop")

    @server.tool()
    async def failing(seconds: float) -> str:
        raise ValueError("an ordinary failure stays an error result")

    return server.streamable_http_app(stateless_http=True, json_response=True)


async def test_sdk_server_middleware_without_decorator(start: Start) -> None:
    log = ToolLog()
    url = start(_server_middleware_app(log, "CRITICAL"))
    answer = await call_and_cancel(url, log, "undecorated")
    assert answer["error"]["code"] == REQUEST_CANCELLED
    async with httpx.AsyncClient(timeout=20) as http:
        response = await http.post(
            url, json=call_body(2, "failing", {"seconds": 1}), headers=SSE_AND_JSON
        )
    assert final_message(response)["result"]["isError"] is True


async def test_sdk_server_middleware_keeps_a_cancelled_tool_out_of_the_error_log(
    start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    """Without the decorator the SDK logs a tool that raised RequestCancelled as an
    unexpected exception, with its traceback (124 lines through its rich handler); the
    server middleware drops that record. An ordinary failure is still logged."""
    caplog.set_level(logging.INFO, "mcp.server.mcpserver")
    log = ToolLog()
    url = start(_server_middleware_app(log, "INFO"))
    answer = await call_and_cancel(url, log, "undecorated")
    assert answer["error"]["code"] == REQUEST_CANCELLED
    assert [r for r in caplog.records if "undecorated" in r.getMessage()] == []
    async with httpx.AsyncClient(timeout=20) as http:
        await http.post(url, json=call_body(2, "failing", {"seconds": 1}), headers=SSE_AND_JSON)
    assert any("failing" in r.getMessage() and r.exc_info for r in caplog.records)


async def test_fastmcp_tool_returning_normally_keeps_its_result(start: Start) -> None:
    """A tool that notices the cancellation but chooses to return keeps its result."""
    from fastmcp import FastMCP

    from mcp_cancellation.integrations.fastmcp import fastmcp_middleware

    log = ToolLog()
    server = FastMCP("fastmcp-result", middleware=[fastmcp_middleware()])

    @server.tool
    async def partial(seconds: float) -> str:
        log.mark("t", "started")
        while not cancelled():  # noqa: ASYNC110 - the flag is flipped by another request
            await anyio.sleep(0.02)
        return "partial result"

    url = start(server.http_app(path="/mcp", stateless_http=True, json_response=True))
    answer = await call_and_cancel(url, log, "partial")
    assert "partial result" in str(answer["result"])
