"""The middleware on both of uvicorn's server stacks: plain ``uvicorn`` (asyncio and h11),
which the in-thread servers of the other tests run on, and ``uvicorn[standard]`` (uvloop
and httptools), which many deployments have (the subprocess servers of the worker, demo
and deployment tests pick it too, as uvicorn's ``auto`` does once it is installed).

The two stacks differ exactly where the middleware works: how a body arrives (in one
message or several), how a closed connection is reported (``http.disconnect``, or a
``send`` that fails), and the event loop the watch timers and kill timers run on. So each
way of cancelling a call runs on both, with the SDK and FastMCP, in both response modes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client

from mcp_cancellation import signals

from ..jsonrpc import HANDSHAKE, SSE_AND_JSON, call_body, cancel_body, final_message
from ..support import async_wait_until
from ._helpers import Harness, Serve, call_then_hang_up, start_and_cancel, wait_disconnect_recorded

pytestmark = pytest.mark.e2e

#: uvicorn's options for each stack, and the names they load, which the tests check (a test
#: that ran on the other stack would prove nothing).
STACKS = {
    "asyncio-h11": ({"loop": "asyncio", "http": "h11"}, "asyncio", "H11Protocol"),
    "uvloop-httptools": ({"loop": "uvloop", "http": "httptools"}, "uvloop", "HttpToolsProtocol"),
}


@pytest.fixture(params=list(STACKS))
def stack(request: pytest.FixtureRequest) -> str:
    """The server stack: plain uvicorn's, then uvicorn[standard]'s."""
    name: str = request.param
    return name


def serve_on(
    serve: Serve, stack: str, flavour: str, json_response: bool, **options: Any
) -> Harness:
    """A server on *stack*, checked to run on it."""
    config, loop_module, protocol = STACKS[stack]
    harness = serve(flavour, json_response=json_response, server=config, **options)
    uvicorn = harness.server
    assert uvicorn.config.http_protocol_class.__name__ == protocol
    (listener,) = uvicorn.server.servers
    assert type(listener.get_loop()).__module__.split(".")[0] == loop_module
    return harness


async def test_a_notification_cancels_a_call(
    serve: Serve, stack: str, flavour: str, json_response: bool, http: httpx.AsyncClient
) -> None:
    harness = serve_on(serve, stack, flavour, json_response)
    answer = await start_and_cancel(harness, http, http, {}, {}, seconds=30)
    assert answer["error"]["code"] == -32800
    assert answer["error"]["data"] == {"reason": "test"}
    assert await harness.wait_outcome("job", "cancelled") == "cancelled"
    await harness.wait_empty()


@pytest.mark.parametrize(("tool", "outcome"), [("poll", "cancelled"), ("stuck", "killed")])
async def test_closing_the_stream_cancels_a_call(
    serve: Serve,
    stack: str,
    flavour: str,
    json_response: bool,
    http: httpx.AsyncClient,
    tool: str,
    outcome: str,
) -> None:
    """A polling call sees the cancellation; a call that never polls is killed once the
    grace ends (the kill timer runs on the stack's loop). In SSE mode the SDK may cancel
    the handler of a closed stream first: then a polling call is killed too."""
    harness = serve_on(serve, stack, flavour, json_response)
    key = await call_then_hang_up(harness, http, HANDSHAKE, tool, "hang-up")
    await wait_disconnect_recorded(harness, key)
    expected = {outcome} if json_response else {outcome, "killed"}
    assert await harness.wait_outcome(key, *expected, "completed") in expected
    await harness.wait_empty()


async def _chunks(body: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


async def test_a_body_in_many_chunks(
    serve: Serve, stack: str, flavour: str, json_response: bool, http: httpx.AsyncClient
) -> None:
    """A chunked call (its body in many ``http.request`` messages) is tracked and
    cancellable; a chunked notification over the body limit is refused with 413 and
    records nothing."""
    import json

    harness = serve_on(serve, stack, flavour, json_response, max_body_bytes=4096)
    answers: list[httpx.Response] = []
    call = json.dumps(call_body("job", "poll", {"seconds": 30})).encode()

    async def start() -> None:
        answers.append(await http.post(harness.url, content=_chunks(call, 7), headers=SSE_AND_JSON))

    async with anyio.create_task_group() as tg:
        tg.start_soon(start)
        await harness.wait_started()
        padded = cancel_body("job", "x" * 5000)
        refused = await http.post(
            harness.url, content=_chunks(json.dumps(padded).encode(), 512), headers=SSE_AND_JSON
        )
        assert refused.status_code == 413, refused.text
        assert harness.cancellations == []
        cancel = json.dumps(cancel_body("job", "chunked")).encode()
        accepted = await http.post(harness.url, content=_chunks(cancel, 5), headers=SSE_AND_JSON)
        assert accepted.status_code == 202, accepted.text
    assert final_message(answers[0])["error"]["data"] == {"reason": "chunked"}
    assert [c["reason"] for c in harness.cancellations] == ["chunked"]
    await harness.wait_empty()


async def test_a_stateful_session_cancels_its_call(
    serve: Serve, stack: str, flavour: str, json_response: bool
) -> None:
    """The ``mcp`` client's own cancellation (a notification in its session) stops the
    call, scoped by the session the server issued."""
    harness = serve_on(serve, stack, flavour, json_response, stateless=False)
    stopped: list[dict[str, Any]] = []

    def record(sender: object, **kwargs: Any) -> None:
        stopped.append(kwargs)

    with signals.request_stopped.connected_to(record, sender=harness.registry):
        async with Client(harness.url, mode="legacy") as client:
            with anyio.move_on_after(30) as scope:
                async with anyio.create_task_group() as tg:

                    async def cancel_once_started() -> None:
                        await harness.wait_started()
                        scope.cancel()  # the client POSTs notifications/cancelled

                    tg.start_soon(cancel_once_started)
                    await client.call_tool("poll", {"seconds": 30})
            assert scope.cancelled_caught
            await async_wait_until(lambda: len(stopped) == 1)
            assert not (await client.call_tool("echo", {"text": "still here"})).is_error
    assert [s["outcome"] for s in stopped] == ["stopped"]
    assert [c["scope"] for c in harness.cancellations] == [stopped[0]["scope"]]
    assert stopped[0]["scope"].startswith("session:")
    await harness.wait_empty()
