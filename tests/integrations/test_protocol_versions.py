"""A 2026-07-28 notification is left to the SDK; a stateful session's cancellation
reaches both the SDK and the registry."""

from __future__ import annotations

import anyio
import httpx
import pytest

from ._helpers import Serve, start_and_cancel

pytestmark = pytest.mark.e2e


async def test_modern_notification_is_left_to_the_sdk(
    serve: Serve, http: httpx.AsyncClient
) -> None:
    """At 2026-07-28 there are no client notifications on HTTP (the SDK acknowledges and
    drops them); cancelling is closing the stream."""
    harness = serve("sdk", json_response=True)
    answer = await start_and_cancel(harness, http, http, {}, {"mcp-protocol-version": "2026-07-28"})
    assert "result" in answer
    assert harness.cancellations == []


async def test_stateful_session_cancel_reaches_sdk_and_registry(serve: Serve) -> None:
    """In front of a stateful app the notification (with Mcp-Session-Id) is recorded and
    also handed to the SDK; the tool stops either way and no row is left."""
    from mcp import Client

    harness = serve("sdk", json_response=False, stateless=False)
    async with Client(harness.url, mode="legacy") as client:
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call_tool, "poll", {"seconds": 30})
            (key,) = await harness.wait_started()
            tg.cancel_scope.cancel()  # the client POSTs notifications/cancelled
        assert await harness.wait_outcome(key, "cancelled", "killed", "completed") != "completed"
        echo = await client.call_tool("echo", {"text": "still here"})
        assert not echo.is_error
    await harness.wait_empty()
