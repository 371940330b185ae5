"""``notifications/cancelled`` on one POST stops the tool running on another POST of the
same caller, and nobody else's notification touches it."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult

from mcp_cancellation import REQUEST_CANCELLED

from ..jsonrpc import SSE_AND_JSON, call_body, cancel_body, final_message
from ..support import async_wait_until
from ._helpers import Serve, refused_then_cancelled, start_and_cancel

pytestmark = pytest.mark.e2e


async def test_second_connection_cancels_and_client_gets_32800(
    serve: Serve, http: httpx.AsyncClient, flavour: str, json_response: bool
) -> None:
    harness = serve(flavour, json_response=json_response)
    outcome: dict[str, object] = {}
    async with Client(harness.url, mode="legacy") as client:

        async def call() -> None:
            try:
                outcome["result"] = await client.call_tool("poll", {"seconds": 30})
            except MCPError as exc:
                outcome["error"] = exc

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            (request_id,) = await harness.wait_started()
            answer = await http.post(
                harness.url,
                json=cancel_body(int(request_id), "user pressed stop"),
                headers=SSE_AND_JSON,
            )
            assert answer.status_code == 202
    error = outcome.get("error")
    assert isinstance(error, MCPError), outcome
    assert error.code == REQUEST_CANCELLED
    assert error.message == "Request cancelled"
    assert error.data == {"reason": "user pressed stop"}
    assert harness.log.last(request_id) == "cancelled"  # stopped by polling, not completed
    assert [c["method"] for c in harness.cancellations] == ["notifications/cancelled"]
    assert harness.cancellations[0]["scope"] == "ip:127.0.0.1"
    await harness.wait_empty()


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16", "utf-32-le", "utf-8-sig"])
async def test_a_cancel_the_sdk_cannot_parse_cancels_nothing(
    serve: Serve, http: httpx.AsyncClient, encoding: str
) -> None:
    """The middleware reads a body with the SDK's own parser: a notification the SDK
    refuses as a parse error (here, valid JSON in an encoding other than plain UTF-8,
    which Python's ``json.loads`` would accept) must not cancel anything."""
    harness = serve("sdk", json_response=True)
    body = json.dumps(cancel_body("job")).encode(encoding)
    refused = await refused_then_cancelled(harness, http, body, {}, 400)  # the SDK's own
    assert refused.json()["error"]["code"] == -32700  # parse error


#: Notifications the SDK refuses though its parser reads them: (name, body, headers,
#: the SDK's status).
REFUSED_BY_THE_SDK: list[tuple[str, dict[str, Any], dict[str, str], int]] = [
    ("no jsonrpc", {"method": "notifications/cancelled"}, {}, 400),
    ("jsonrpc 1.0", {"jsonrpc": "1.0", "method": "notifications/cancelled"}, {}, 400),
    ("jsonrpc a number", {"jsonrpc": 2.0, "method": "notifications/cancelled"}, {}, 400),
    ("accept text/html", cancel_body("job"), {"accept": "text/html"}, 406),
    ("no accept", cancel_body("job"), {"accept": ""}, 406),
]


@pytest.mark.parametrize(
    ("body", "headers", "status"),
    [case[1:] for case in REFUSED_BY_THE_SDK],
    ids=[case[0] for case in REFUSED_BY_THE_SDK],
)
async def test_a_cancel_the_sdk_refuses_cancels_nothing(
    serve: Serve,
    http: httpx.AsyncClient,
    flavour: str,
    json_response: bool,
    body: dict[str, Any],
    headers: dict[str, str],
    status: int,
) -> None:
    """A notification whose envelope or ``Accept`` header the SDK refuses gets the SDK's
    own error and cancels nothing; the same caller's valid notification then does."""
    harness = serve(flavour, json_response=json_response)
    refused_body = {**body, "params": {"requestId": "job", "reason": "refused"}}
    refused = await refused_then_cancelled(harness, http, refused_body, headers, status)
    assert refused.json()["error"]["code"] in (-32600, -32602), refused.text


async def test_a_cancel_with_a_null_id_is_a_notification_as_for_the_sdk(
    serve: Serve, http: httpx.AsyncClient, flavour: str
) -> None:
    """The SDK validates ``{"id": null, "method": "notifications/cancelled", ...}`` as a
    notification (some JSON-RPC clients send a null id with theirs): so does the
    middleware, and it cancels the call."""
    harness = serve(flavour, json_response=True)
    null_id = {**cancel_body("job", "null id"), "id": None}
    answer = await start_and_cancel(harness, http, http, {}, {}, cancel=null_id, seconds=30)
    assert answer["error"]["data"] == {"reason": "null id"}
    assert [c["reason"] for c in harness.cancellations] == ["null id"]
    await harness.wait_empty()


async def test_other_caller_cannot_cancel(
    serve: Serve, http: httpx.AsyncClient, other_http: httpx.AsyncClient, flavour: str
) -> None:
    harness = serve(flavour, json_response=True)
    outcome: dict[str, object] = {}
    async with Client(harness.url, mode="legacy") as client:

        async def call() -> None:
            outcome["result"] = await client.call_tool("hold", {"key": "victim"})

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            (request_id,) = await harness.wait_started()
            # Another address sends notifications/cancelled for ids 0..250 (the victim's
            # among them), as ints and as strings, while the victim's tool runs.
            assert 0 <= int(request_id) <= 250, request_id
            limiter = anyio.CapacityLimiter(16)

            async def attack(target: object) -> None:
                async with limiter:
                    answer = await other_http.post(
                        harness.url, json=cancel_body(target, "attack"), headers=SSE_AND_JSON
                    )
                    assert answer.status_code == 202

            async with anyio.create_task_group() as attackers:
                for target in range(251):
                    attackers.start_soon(attack, target)
                for target in range(1, 21):
                    attackers.start_soon(attack, str(target))
            # The attacker holds no rows, and nothing was recorded for the victim.
            stats = harness.stats()
            assert stats.rows == {}
            assert harness.cancellations == []
            harness.log.release("victim")
    result = outcome.get("result")
    assert isinstance(result, CallToolResult), outcome
    assert not result.is_error
    assert harness.log.last(request_id) == "completed"
    await harness.wait_empty()


async def test_same_id_two_callers_cancel_one_only(
    serve: Serve, http: httpx.AsyncClient, other_http: httpx.AsyncClient, flavour: str
) -> None:
    harness = serve(flavour, json_response=True)
    answers: dict[str, httpx.Response] = {}

    async def call(
        name: str, client: httpx.AsyncClient, tool: str, arguments: dict[str, Any]
    ) -> None:
        answers[name] = await client.post(
            harness.url, json=call_body(5, tool, arguments), headers=SSE_AND_JSON
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(call, "a", http, "poll", {"seconds": 30})
        await harness.wait_started(1)
        tg.start_soon(call, "b", other_http, "poll", {"seconds": 30})
        # Both requests use id 5, each in its own caller's scope.
        await async_wait_until(lambda: harness.stats().total_in_flight == 2, within=10)
        answer = await http.post(harness.url, json=cancel_body(5), headers=SSE_AND_JSON)
        assert answer.status_code == 202
        await async_wait_until(lambda: "a" in answers, within=10)
        # A's answer can reach the client before A's handler has released its row: wait
        # for that release (the event), then B must be untouched, still running.
        await async_wait_until(lambda: "ip:127.0.0.1" not in harness.stats().in_flight, within=10)
        assert "b" not in answers
        assert harness.stats().in_flight == {"ip:127.0.0.2": 1}
        answer = await other_http.post(harness.url, json=cancel_body(5), headers=SSE_AND_JSON)
        assert answer.status_code == 202
    assert final_message(answers["a"])["error"]["code"] == REQUEST_CANCELLED
    assert final_message(answers["b"])["error"]["code"] == REQUEST_CANCELLED
    assert [c["scope"] for c in harness.cancellations] == ["ip:127.0.0.1", "ip:127.0.0.2"]
    await harness.wait_empty()


@pytest.mark.parametrize(
    ("mode", "method"),
    [("legacy", "notifications/cancelled"), ("2026-07-28", "disconnect")],
)
async def test_what_the_sdk_client_sends_when_its_caller_cancels(
    serve: Serve, mode: str, method: str
) -> None:
    """What docs and ``mcp-cancellation client`` say of the ``mcp`` client: on protocol
    2025-11-25 (``mode="legacy"``) cancelling ``call_tool`` POSTs
    ``notifications/cancelled``; on 2026-07-28 it closes the call's stream."""
    harness = serve("sdk", json_response=False)
    async with Client(harness.url, mode=mode) as client:
        with anyio.move_on_after(30) as scope:
            async with anyio.create_task_group() as tg:

                async def cancel_once_started() -> None:
                    await harness.wait_started()
                    scope.cancel()

                tg.start_soon(cancel_once_started)
                await client.call_tool("poll", {"seconds": 30})
        assert scope.cancelled_caught
        # The session stays open until the server has recorded the cancellation and the
        # call has ended, then for one more round trip: at 2025-11-25 the call's late
        # -32800 comes on its own POST, and the mcp client fails its own shutdown if that
        # answer reaches the session as it closes (see mcp_cancellation._client).
        await async_wait_until(lambda: len(harness.cancellations) == 1, within=10)
        await harness.wait_empty()
        await client.list_tools()
    assert harness.cancellations[0]["method"] == method
    assert harness.cancellations[0]["scope"] == "ip:127.0.0.1"
    await harness.wait_empty()


async def test_the_accept_rule_follows_the_servers_response_mode(
    serve: Serve, http: httpx.AsyncClient, flavour: str, json_response: bool
) -> None:
    """As the SDK does: an SSE-mode server wants ``text/event-stream`` in ``Accept`` too
    (406 without it), a JSON-mode server only ``application/json``."""
    harness = serve(flavour, json_response=json_response)
    answers: list[httpx.Response] = []

    async def call() -> None:
        answers.append(
            await http.post(
                harness.url, json=call_body("job", "poll", {"seconds": 30}), headers=SSE_AND_JSON
            )
        )

    json_only = {**SSE_AND_JSON, "accept": "application/json"}
    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        await harness.wait_started()
        answer = await http.post(
            harness.url, json=cancel_body("job", "json only"), headers=json_only
        )
        if json_response:
            assert answer.status_code == 202, answer.text
        else:
            assert answer.status_code == 406, answer.text
            assert "text/event-stream" in answer.json()["error"]["message"]
            assert harness.cancellations == []
            wildcard = {**SSE_AND_JSON, "accept": "*/*"}
            answer = await http.post(harness.url, json=cancel_body("job", "any"), headers=wildcard)
            assert answer.status_code == 202, answer.text
    reason = "json only" if json_response else "any"
    assert [c["reason"] for c in harness.cancellations] == [reason]
    assert final_message(answers[0])["error"]["data"] == {"reason": reason}
    await harness.wait_empty()


async def test_an_id_reused_while_its_cancelled_call_finishes_starts_uncancelled(
    serve: Serve, http: httpx.AsyncClient, flavour: str, json_response: bool
) -> None:
    """A client that counts ids from 1 reuses an id as soon as it cancelled its call, while
    that call is still finishing (and behind one NAT address, every stateless client
    shares the scope): the new call starts uncancelled."""
    harness = serve(flavour, json_response=json_response)
    for round_ in range(5):
        harness.log.clear()
        old = call_body("job", "poll", {"seconds": 30})
        async with anyio.create_task_group() as tg:
            answers: dict[str, httpx.Response] = {}

            async def post(name: str, body: dict[str, Any], answers: Any = answers) -> None:
                answers[name] = await http.post(harness.url, json=body, headers=SSE_AND_JSON)

            tg.start_soon(post, "old", old)
            await harness.wait_started()
            cancelled = await http.post(
                harness.url, json=cancel_body("job", f"round {round_}"), headers=SSE_AND_JSON
            )
            assert cancelled.status_code == 202
            # The same id at once, before the cancelled call has answered.
            tg.start_soon(post, "new", call_body("job", "poll", {"seconds": 0.5}))
        assert final_message(answers["old"])["error"]["code"] == REQUEST_CANCELLED
        message = final_message(answers["new"])
        assert "result" in message, message
    await harness.wait_empty()
