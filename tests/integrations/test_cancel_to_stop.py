"""Does cancellation stop the work? ``request.stopped`` and the metrics built on it, through
real servers (the SDK and FastMCP behind the middleware, served by uvicorn):

* a polling tool cancelled from another request ends ``stopped``;
* a tool that never polls ends ``killed`` after ``stream_cancel_timeout`` when its client
  hangs up, and shows in ``ignored_cancellations`` after the grace period when it is
  cancelled from another request (then ends ``completed``);
* two workers on one Redis: recorded on A, stopped on B, observed once;
* made-up tool names never become label values.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest
from prometheus_client import CollectorRegistry

from mcp_cancellation import CancellationRegistry, signals
from mcp_cancellation.storage._memory import MemoryStorage
from mcp_cancellation.telemetry.prometheus import metrics_app

from ..jsonrpc import HANDSHAKE, SSE_AND_JSON, call_body, cancel_body, final_message
from ..support import RedisServer, async_wait_until
from ._helpers import Harness, Serve, call_then_hang_up, workers_sharing

TOOLS = ["poll", "stuck", "hold", "echo"]
#: Calls to made-up tool names (nine in ten; the rest call a registered tool).
CALLS = 300  # (the bound is structural: every made-up name maps to `other`, whatever the count)


@pytest.fixture
def stopped() -> Iterator[list[dict[str, Any]]]:
    """Every ``request.stopped`` sent during the test, with its sender."""
    seen: list[dict[str, Any]] = []

    def record(sender: object, **kwargs: Any) -> None:
        seen.append({"sender": sender, **kwargs})

    with signals.request_stopped.connected_to(record):
        yield seen


def _registry(**options: Any) -> CancellationRegistry:
    return CancellationRegistry(MemoryStorage(), janitor_interval=None, **options)


async def _start(
    harness: Harness,
    http: httpx.AsyncClient,
    request_id: str,
    tool: str,
    arguments: dict[str, Any],
    answers: list[httpx.Response],
) -> None:
    answers.append(
        await http.post(
            harness.url, json=call_body(request_id, tool, arguments), headers=SSE_AND_JSON
        )
    )


async def test_a_polling_tool_cancelled_from_another_request_ends_stopped(
    serve: Serve, http: httpx.AsyncClient, flavour: str, stopped: list[dict[str, Any]]
) -> None:
    harness = serve(flavour, json_response=True, registry=_registry(), tools=TOOLS)
    answers: list[httpx.Response] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(_start, harness, http, "p1", "poll", {"seconds": 30}, answers)
        await harness.wait_started()
        response = await http.post(harness.url, json=cancel_body("p1"), headers=SSE_AND_JSON)
        assert response.status_code == 202
    assert final_message(answers[0])["error"]["code"] == -32800
    await async_wait_until(lambda: len(stopped) == 1, within=10)
    (event,) = stopped
    assert event["sender"] is harness.registry
    assert (event["request_id"], event["outcome"], event["tool"]) == ("p1", "stopped", "poll")
    assert event["scope"] == "ip:127.0.0.1"
    assert event["ignored"] is False
    assert event["seconds"] >= 0


async def test_a_tool_that_never_polls_is_killed_after_its_client_hangs_up(
    serve: Serve, http: httpx.AsyncClient, flavour: str, stopped: list[dict[str, Any]]
) -> None:
    # JSON responses: the SDK does not cancel the handler itself when the client goes, so
    # only the middleware's stream_cancel_timeout stops the tool.
    harness = serve(
        flavour, json_response=True, registry=_registry(), tools=TOOLS, stream_cancel_timeout=0.2
    )
    key = await call_then_hang_up(harness, http, HANDSHAKE, "stuck", "s1")
    assert await harness.wait_outcome(key, "killed", "completed") == "killed"
    await async_wait_until(lambda: len(stopped) == 1, within=10)
    (event,) = stopped
    assert (event["request_id"], event["outcome"], event["tool"]) == ("s1", "killed", "stuck")
    assert event["seconds"] >= 0.2  # the kill comes stream_cancel_timeout after the hang-up


async def test_a_tool_that_never_polls_shows_as_ignoring_its_cancellation(
    serve: Serve, http: httpx.AsyncClient, flavour: str, stopped: list[dict[str, Any]]
) -> None:
    registry = _registry(cancel_grace=0.2)
    exposition = CollectorRegistry()
    metrics = metrics_app(registry, collector_registry=exposition)
    harness = serve(flavour, json_response=True, registry=registry, tools=TOOLS)
    answers: list[httpx.Response] = []
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_start, harness, http, "h1", "hold", {"key": "h1"}, answers)
            await harness.wait_started()
            response = await http.post(harness.url, json=cancel_body("h1"), headers=SSE_AND_JSON)
            assert response.status_code == 202
            # Still running past the grace period: listed, by its tool.
            await async_wait_until(lambda: bool(registry.ignoring()), within=10)
            (token,) = registry.ignoring()
            assert (token.request_id, token.tool) == ("h1", "hold")
            body, _ = await metrics.bridge.render()
            assert 'mcp_cancellation_ignored_cancellations{tool="hold"} 1.0' in body.decode()
            assert stopped == []
            harness.log.release("h1")
        assert final_message(answers[0])["result"]["content"][0]["text"] == "completed"
        await async_wait_until(lambda: len(stopped) == 1, within=10)
        (event,) = stopped
        assert (event["outcome"], event["tool"], event["ignored"]) == ("completed", "hold", True)
        assert event["seconds"] >= 0.2
        assert registry.ignoring() == []
        body, _ = await metrics.bridge.render()
        text = body.decode()
        assert 'mcp_cancellation_cancellations_ignored_total{tool="hold"} 1.0' in text
        assert (
            'mcp_cancellation_cancel_to_stop_seconds_count{outcome="completed",scope_kind="ip"}'
            " 1.0" in text
        )
        assert 'mcp_cancellation_ignored_cancellations{tool="hold"}' not in text
    finally:
        metrics.bridge.uninstall()


@pytest.mark.redis
async def test_recorded_on_one_worker_stopped_on_another_observed_once(
    serve: Serve,
    http: httpx.AsyncClient,
    redis_server: RedisServer,
    stopped: list[dict[str, Any]],
) -> None:
    async with workers_sharing(redis_server.url) as registries:
        bridges = [metrics_app(r, collector_registry=CollectorRegistry()) for r in registries]
        try:
            worker_a = serve("sdk", json_response=True, registry=registries[0], tools=TOOLS)
            worker_b = serve("sdk", json_response=True, registry=registries[1], tools=TOOLS)
            answers: list[httpx.Response] = []
            async with anyio.create_task_group() as tg:
                tg.start_soon(_start, worker_b, http, "shared", "poll", {"seconds": 30}, answers)
                await worker_b.wait_started()
                response = await http.post(
                    worker_a.url, json=cancel_body("shared"), headers=SSE_AND_JSON
                )
                assert response.status_code == 202
            assert final_message(answers[0])["error"]["code"] == -32800
            await async_wait_until(lambda: len(stopped) >= 1, within=10)
            (event,) = stopped
            assert event["sender"] is registries[1]  # the worker that ran it
            assert (event["outcome"], event["tool"]) == ("stopped", "poll")
            line = (
                'mcp_cancellation_cancel_to_stop_seconds_count{outcome="stopped",scope_kind="ip"}'
            )
            counts = []
            for app in bridges:
                body, _ = await app.bridge.render()
                found = [x for x in body.decode().splitlines() if x.startswith(line)]
                counts.append(found[0] if found else None)
            assert counts == [None, line + " 1.0"]
        finally:
            for app in bridges:
                app.bridge.uninstall()


async def test_made_up_tool_names_never_become_label_values(
    serve: Serve, http: httpx.AsyncClient, flavour: str
) -> None:
    tools: set[str | None] = set()

    class Recording(CancellationRegistry):
        def request(
            self,
            request_id: object,
            scope: str = "global",
            *,
            tool: str | None = None,
            labels: dict[str, str] | None = None,
            at_start: bool = False,
        ) -> Any:
            tools.add(tool)
            return super().request(request_id, scope, tool=tool, labels=labels, at_start=at_start)

    harness = serve(
        flavour,
        json_response=True,
        registry=Recording(MemoryStorage(), janitor_interval=None),
        tools=TOOLS,
    )
    limit = asyncio.Semaphore(16)

    async def call(i: int) -> None:
        async with limit:
            name = f"made-up-{uuid.uuid4().hex}" if i % 10 else "echo"
            body = call_body(i, name, {"text": "x"})
            response = await http.post(harness.url, json=body, headers=SSE_AND_JSON)
            assert response.status_code == 200

    await asyncio.gather(*(call(i) for i in range(CALLS)))
    assert tools == {"echo", "other"}
    await harness.wait_empty()


async def test_tool_names_list_what_the_server_registered() -> None:
    from fastmcp import FastMCP
    from mcp.server.mcpserver import MCPServer

    from mcp_cancellation import integrations as mcp_sdk
    from mcp_cancellation.integrations import fastmcp

    fast = FastMCP("names")
    sdk = MCPServer("names")

    @fast.tool
    async def fast_tool(x: int) -> int:
        return x

    @sdk.tool()
    async def sdk_tool(x: int) -> int:
        return x

    assert await fastmcp.tool_names(fast)() == ["fast_tool"]
    assert await mcp_sdk.tool_names(sdk)() == ["sdk_tool"]
    # A tool added later is found by the next listing (the middleware asks every 5 s).
    sdk.add_tool(fast_tool, name="later")
    assert sorted(await mcp_sdk.tool_names(sdk)()) == ["later", "sdk_tool"]
