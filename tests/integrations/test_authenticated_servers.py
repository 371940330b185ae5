"""In front of a server that requires authentication, a notification the SDK refuses (no
token, a forged one) records nothing, whether the middleware is installed inside the app
or wrapped around it; one the SDK accepts is recorded, within the quota."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest
from starlette.middleware import Middleware

from mcp_cancellation import CancellationMiddleware, CancellationRegistry, MemoryStorage, signals

from ..jsonrpc import SSE_AND_JSON, call_body, cancel_body
from ..support import UvicornThread, async_wait_until, stats_now
from ._helpers import ToolLog, build_fastmcp_app, build_sdk_app

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("placement", ["after authentication", "around the app", "fastmcp"])
async def test_only_notifications_the_sdk_accepts_are_recorded(
    http: httpx.AsyncClient, placement: str
) -> None:
    """``install()`` and FastMCP's ``http_app(middleware=...)`` run the middleware after
    authentication; wrapped around the app, it sees no principal, and the SDK decides who
    may send a notification."""
    log = ToolLog()
    registry = CancellationRegistry(MemoryStorage(), janitor_interval=None, max_rows_per_scope=1)
    served: Any
    if placement == "fastmcp":
        served = build_fastmcp_app(
            log,
            json_response=True,
            auth=True,
            middleware=[Middleware(CancellationMiddleware, registry=registry)],
        )
    else:
        served = build_sdk_app(log, json_response=True, auth=True)
        if placement == "after authentication":
            served.user_middleware.append(Middleware(CancellationMiddleware, registry=registry))
        else:
            served = CancellationMiddleware(served, registry=registry)
    recorded: list[dict[str, Any]] = []

    def record(sender: Any, **kwargs: Any) -> None:
        recorded.append(kwargs)

    alice = {**SSE_AND_JSON, "authorization": "Bearer alice-token"}
    with (
        signals.request_cancelled.connected_to(record, sender=registry),
        UvicornThread(served, proxy_headers=False) as server,
    ):
        url = server.url + "/mcp"

        async def call(request_id: str) -> None:
            answer = await http.post(
                url, json=call_body(request_id, "hold", {"key": "k"}), headers=alice
            )
            assert answer.status_code == 200, answer.text

        async with anyio.create_task_group() as tg:
            tg.start_soon(call, "a")
            tg.start_soon(call, "b")
            await async_wait_until(lambda: len(log.started()) == 2, within=10)
            for refused_headers in (SSE_AND_JSON, {**SSE_AND_JSON, "authorization": "Bearer x"}):
                refused = await http.post(
                    url, json=cancel_body("a", "anon"), headers=refused_headers
                )
                assert refused.status_code == 401, refused.text
            assert recorded == []
            accepted = await http.post(url, json=cancel_body("a", "alice"), headers=alice)
            assert accepted.status_code == 202, accepted.text
            # Past the quota of one row: the registry's 429, not the SDK's 202.
            over = await http.post(url, json=cancel_body("b", "alice"), headers=alice)
            assert over.status_code == 429, over.text
            assert over.json()["error"]["code"] == -32000
            log.release("k")
    assert [c["reason"] for c in recorded] == ["alice"]
    stats = stats_now(registry)
    assert (stats.total_rows, stats.total_in_flight) == (0, 0)
