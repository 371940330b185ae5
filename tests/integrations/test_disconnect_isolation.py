"""A disconnect cancels only the request whose client left: another request of the same
scope and id keeps running."""

from __future__ import annotations

import anyio
import httpx
import pytest

from ..jsonrpc import SSE_AND_JSON, call_body, final_message
from ..support import async_wait_until
from ._helpers import Serve

pytestmark = pytest.mark.e2e


async def test_disconnect_cancels_only_the_request_whose_client_left(
    serve: Serve, http: httpx.AsyncClient
) -> None:
    """Two clients of one scope (here one address) both use id 1, as every SDK client
    does: when A hangs up, B's request with the same id must keep running."""
    harness = serve("sdk", json_response=True)
    answers: dict[str, httpx.Response] = {}

    async def call_b() -> None:
        async with httpx.AsyncClient(timeout=20) as other:
            answers["b"] = await other.post(
                harness.url, json=call_body(1, "poll", {"seconds": 1.5}), headers=SSE_AND_JSON
            )

    async def call_a() -> None:
        body = call_body(1, "poll", {"seconds": 30})
        async with http.stream("POST", harness.url, json=body, headers=SSE_AND_JSON) as response:
            async for _ in response.aiter_bytes():
                pass

    async with anyio.create_task_group() as tg:
        tg.start_soon(call_b)
        await async_wait_until(lambda: harness.stats().total_in_flight == 1, within=5)
        async with anyio.create_task_group() as a:
            a.start_soon(call_a)
            await async_wait_until(lambda: harness.stats().total_in_flight == 2, within=5)
            a.cancel_scope.cancel()  # A hangs up
        await async_wait_until(lambda: len(harness.cancellations) == 1, within=5)
        assert harness.cancellations[0]["method"] == "disconnect"
    message = final_message(answers["b"])
    assert "result" in message, message
    assert message["result"]["isError"] is False
    await harness.wait_empty()
