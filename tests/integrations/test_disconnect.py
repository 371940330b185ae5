"""A client that closes its stream cancels its request: every protocol version, both
response modes, polling tools and tools that never poll; at 2025-11-25 and before, only a
stream that cannot be resumed (unless ``disconnect_cancels="always"``)."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest
from mcp import Client

from ..jsonrpc import HANDSHAKE, MODERN, SSE_AND_JSON, cancel_body, versioned_call
from ..support import async_wait_until
from ._helpers import Serve, call_then_hang_up, wait_disconnect_recorded

pytestmark = pytest.mark.e2e


@pytest.fixture(params=[HANDSHAKE, MODERN])
def version(request: pytest.FixtureRequest) -> str:
    """The protocol version the client announces: the handshake's, then 2026-07-28."""
    value: str = request.param
    return value


async def test_disconnect_cancels_polling_tool(
    serve: Serve, http: httpx.AsyncClient, flavour: str, version: str, json_response: bool
) -> None:
    harness = serve(flavour, json_response=json_response)
    key = await call_then_hang_up(harness, http, version, "poll", "hang-up-1")
    assert key == "hang-up-1"
    await wait_disconnect_recorded(harness, key)
    # Polling tools see cancelled() (JSON mode); in SSE mode the SDK may cancel first.
    outcome = await harness.wait_outcome(key, "cancelled", "killed", "completed")
    assert outcome != "completed"
    if json_response:
        assert outcome == "cancelled"
    await harness.wait_empty()


async def test_tool_ignoring_polling_is_cancelled_after_timeout(
    serve: Serve, http: httpx.AsyncClient, version: str, json_response: bool, flavour: str
) -> None:
    harness = serve(flavour, json_response=json_response, stream_cancel_timeout=0.2)
    key = await call_then_hang_up(harness, http, version, "stuck", 77)
    await wait_disconnect_recorded(harness, key)
    assert await harness.wait_outcome(key, "killed", "completed") == "killed"
    await harness.wait_empty()


async def test_no_timeout_means_tool_keeps_running_but_sees_cancelled(
    serve: Serve, http: httpx.AsyncClient
) -> None:
    harness = serve("sdk", json_response=True, stream_cancel_timeout=None)
    body, headers = versioned_call(HANDSHAKE, "holder", "hold", {"key": "k"})

    async def call() -> None:
        await http.post(harness.url, json=body, headers=headers)

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        (key,) = await harness.wait_started()
        tg.cancel_scope.cancel()
    await wait_disconnect_recorded(harness, key)
    assert harness.log.last(key) == "started"  # nothing killed it
    harness.log.release("k")
    assert await harness.wait_outcome(key, "completed") == "completed"
    await harness.wait_empty()


async def test_mcp_client_at_2026_cancels_by_closing_its_stream(
    serve: Serve, json_response: bool
) -> None:
    harness = serve("sdk", json_response=json_response)
    async with Client(harness.url, mode=MODERN) as client, anyio.create_task_group() as tg:
        tg.start_soon(client.call_tool, "poll", {"seconds": 30})
        (key,) = await harness.wait_started()
        tg.cancel_scope.cancel()
    await wait_disconnect_recorded(harness, key)
    assert await harness.wait_outcome(key, "cancelled", "killed", "completed") != "completed"
    await harness.wait_empty()


async def test_finished_response_is_not_a_disconnect(serve: Serve, http: httpx.AsyncClient) -> None:
    harness = serve("sdk", json_response=False)
    for version in (HANDSHAKE, MODERN):
        body, headers = versioned_call(version, 1, "echo", {"text": "hi"})
        response = await http.post(harness.url, json=body, headers=headers)
        assert response.status_code == 200
        assert "hi" in response.text
    await harness.wait_empty()
    assert harness.cancellations == []


async def test_many_json_calls_each_see_their_own_disconnect(
    serve: Serve, http: httpx.AsyncClient
) -> None:
    """In JSON mode the SDK never reads again: the middleware starts a watcher for each
    call that runs long. Calls started at different times, with short calls ending in
    between, and hung up in another order, are each seen once; no call that ended is
    taken for a disconnect."""
    harness = serve("sdk", json_response=True)
    ids = [f"long-{n}" for n in range(5)]
    scopes = {request_id: anyio.CancelScope() for request_id in ids}

    async def call(request_id: str) -> None:
        body, headers = versioned_call(HANDSHAKE, request_id, "poll", {"seconds": 30})
        with scopes[request_id]:
            async with http.stream("POST", harness.url, json=body, headers=headers) as response:
                async for _ in response.aiter_bytes():
                    pass

    async with anyio.create_task_group() as tg:
        for n, request_id in enumerate(ids):
            tg.start_soon(call, request_id)
            await harness.wait_started(n + 1)
            body, headers = versioned_call(HANDSHAKE, f"short-{n}", "echo", {"text": "x"})
            assert (await http.post(harness.url, json=body, headers=headers)).status_code == 200
        for n, request_id in enumerate(reversed(ids)):
            scopes[request_id].cancel()  # httpx closes this call's connection only
            await async_wait_until(lambda n=n: len(harness.cancellations) >= n + 1, within=10)
            assert harness.cancellations[-1]["request_id"] == request_id
            assert await harness.wait_outcome(request_id, "cancelled") == "cancelled"
    assert [c["request_id"] for c in harness.cancellations] == list(reversed(ids))
    assert all(c["method"] == "disconnect" for c in harness.cancellations)
    await harness.wait_empty()


async def test_closing_the_stream_of_a_cancelled_call_is_no_second_cancellation(
    serve: Serve, http: httpx.AsyncClient, flavour: str, json_response: bool
) -> None:
    """A call cancelled by ``notifications/cancelled`` whose client then closes its stream
    (what the mcp client does) was cancelled once: ``request.cancelled`` fires once, so
    ``cancelled_total`` counts one. The closed stream still arms the kill timer."""
    harness = serve(flavour, json_response=json_response)

    async def cancel(key: str) -> None:
        answer = await http.post(harness.url, json=cancel_body(key), headers=SSE_AND_JSON)
        assert answer.status_code == 202
        assert [c["method"] for c in harness.cancellations] == ["notifications/cancelled"]

    # The notification first, then the client closes the call's stream.
    key = await call_then_hang_up(harness, http, HANDSHAKE, "hold", "once", {"key": "k"}, cancel)
    # "hold" ignores the cancellation: only the kill timer, armed once the middleware saw
    # the disconnect, ends it.
    assert await harness.wait_outcome(key, "killed", "completed") == "killed"
    assert [c["method"] for c in harness.cancellations] == ["notifications/cancelled"]
    await harness.wait_empty()


async def test_the_mcp_client_cancelling_at_2025_counts_one_cancellation(
    serve: Serve, json_response: bool
) -> None:
    """The mcp client at 2025-11-25 POSTs ``notifications/cancelled`` and later closes the
    call's stream: one cancellation."""
    harness = serve("sdk", json_response=json_response)
    async with Client(harness.url, mode="legacy") as client:
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call_tool, "hold", {"key": "k"})
            (key,) = await harness.wait_started()
            tg.cancel_scope.cancel()  # the client POSTs notifications/cancelled
        await async_wait_until(lambda: len(harness.cancellations) >= 1, within=10)
    # Leaving the client closed the call's stream: the kill timer ends "hold".
    assert await harness.wait_outcome(key, "killed", "completed") == "killed"
    assert [c["method"] for c in harness.cancellations] == ["notifications/cancelled"]
    await harness.wait_empty()


async def test_a_call_whose_id_the_registry_cannot_key_is_still_stopped_by_a_disconnect(
    serve: Serve, http: httpx.AsyncClient, flavour: str, json_response: bool
) -> None:
    """The SDKs serve a call with a 300-byte string id; the registry keys ids of at most
    256 bytes, so the call is not in the table, but closing its stream still cancels it."""
    harness = serve(flavour, json_response=json_response)
    await call_then_hang_up(harness, http, HANDSHAKE, "stuck", "y" * 300)
    assert await harness.wait_outcome("", "killed", "completed") == "killed"
    assert [(c["request_id"], c["method"]) for c in harness.cancellations] == [("", "disconnect")]
    await harness.wait_empty()


class _Events:
    """An event store that keeps every event (a stream could be resumed), as the SDK's
    ``EventStore`` interface asks."""

    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []

    async def store_event(self, stream_id: str, message: object) -> str:
        self.events.append((stream_id, message))
        return str(len(self.events))

    async def replay_events_after(self, last_event_id: str, send_callback: Any) -> str | None:
        return None


async def _open_session(http: httpx.AsyncClient, url: str, version: str) -> dict[str, str]:
    """Initialize a session on a stateful server; the headers of its later requests."""
    initialize = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "disconnect-test", "version": "1"},
        },
    }
    answer = await http.post(url, json=initialize, headers=SSE_AND_JSON)
    assert answer.status_code == 200, answer.text
    headers = {"mcp-session-id": answer.headers["mcp-session-id"]}
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    await http.post(
        url, json=initialized, headers={**SSE_AND_JSON, **headers, "mcp-protocol-version": version}
    )
    return headers


@pytest.mark.parametrize(
    ("policy", "version", "stopped"),
    [
        ("auto", HANDSHAKE, False),  # resumable: SHOULD NOT be taken as a cancellation
        ("always", HANDSHAKE, True),
    ],
)
async def test_a_resumable_stream_is_cancelled_by_a_disconnect_only_if_told_so(
    serve: Serve, http: httpx.AsyncClient, policy: str, version: str, stopped: bool
) -> None:
    """A stateful server with an event store can resume a 2025-11-25 stream: its client's
    disconnect is not a cancellation, unless ``disconnect_cancels="always"``."""
    harness = serve(
        "sdk",
        json_response=False,
        stateless=False,
        event_store=_Events(),
        disconnect_cancels=policy,
    )
    session = await _open_session(http, harness.url, version)
    body, headers = versioned_call(version, 5, "poll", {"seconds": 1.0})

    async def call() -> None:
        async with http.stream(
            "POST", harness.url, json=body, headers={**headers, **session}
        ) as response:
            async for _ in response.aiter_bytes():
                pass

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        (key,) = await harness.wait_started()
        tg.cancel_scope.cancel()  # the client hangs up
    outcome = await harness.wait_outcome(key, "completed", "cancelled", "killed")
    # (A stateful server runs the tool in its session's task: the kill timer stops it.)
    assert outcome in (("cancelled", "killed") if stopped else ("completed",))
    assert [c["method"] for c in harness.cancellations] == (["disconnect"] if stopped else [])
