"""A session the server issued scopes its requests: two stateful sessions at one address
cancel only their own calls although their ids repeat, as in the SDK alone; a session id
the server never issued scopes nothing, and a terminated session is forgotten."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest
from mcp import Client

from mcp_cancellation import CancellationMiddleware, CancellationRegistry, MemoryStorage, signals
from mcp_cancellation.integrations._sessions import IssuedSessions

from ..jsonrpc import HANDSHAKE, SSE_AND_JSON, call_body, cancel_body
from ..support import UvicornThread, async_wait_until
from ._helpers import FlakyStorage, Serve, ToolLog, build_sdk_app, start_and_cancel

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("json_response", [False, True], ids=["sse", "json"])
async def test_two_sessions_at_one_address_cancel_only_their_own_calls(
    serve: Serve, flavour: str, json_response: bool
) -> None:
    harness = serve(flavour, json_response=json_response, stateless=False)
    stopped: list[dict[str, Any]] = []

    def record(sender: object, **kwargs: Any) -> None:
        stopped.append(kwargs)

    with signals.request_stopped.connected_to(record, sender=harness.registry):
        async with Client(harness.url, mode="legacy") as a, Client(harness.url, mode="legacy") as b:
            results: dict[str, Any] = {}

            async def call_b() -> None:
                results["b"] = await b.call_tool("hold", {"key": "b"})

            async with anyio.create_task_group() as tg:
                tg.start_soon(call_b)
                (key,) = await harness.wait_started()
                with anyio.move_on_after(30) as scope:
                    async with anyio.create_task_group() as inner:

                        async def cancel_once_started() -> None:
                            # Both sessions' calls run, with the same id.
                            await async_wait_until(
                                lambda: harness.log.outcomes[key].count("started") == 2
                            )
                            scope.cancel()  # a's client POSTs notifications/cancelled

                        inner.start_soon(cancel_once_started)
                        await a.call_tool("poll", {"seconds": 30})
                assert scope.cancelled_caught
                # a's call has ended (stopped); only then is b's released.
                await async_wait_until(lambda: len(stopped) == 1)
                harness.log.release("b")
            assert not results["b"].is_error
    # Only a's call was cancelled, in a's own session scope; b's ran on untouched.
    assert [(s["request_id"], s["outcome"]) for s in stopped] == [(key, "stopped")]
    assert stopped[0]["scope"].startswith("session:")
    assert [c["scope"] for c in harness.cancellations] == [stopped[0]["scope"]]
    await harness.wait_empty()


async def test_a_session_id_the_server_never_issued_scopes_nothing(
    serve: Serve, http: httpx.AsyncClient
) -> None:
    """Any client can set the header: a made-up id leaves the call in the address's
    scope, where a notification without the header still finds it."""
    harness = serve("sdk", json_response=True)
    forged = {"mcp-session-id": "0123456789abcdef0123456789abcdef"}
    answer = await start_and_cancel(harness, http, http, forged, {})
    assert [c["scope"] for c in harness.cancellations] == ["ip:127.0.0.1"]
    assert answer["error"]["code"] == -32800
    await harness.wait_empty()


async def test_sessions_are_the_sdk_s_own_table_and_end_with_it() -> None:
    """The middleware keeps no copy of an SDK server's sessions (a bounded copy could
    forget a session the SDK still accepts): it asks the SDK's table, which the client's
    DELETE empties. (This also pins where SDK 2.x keeps that table.)"""
    log = ToolLog()
    registry = CancellationRegistry(MemoryStorage(), janitor_interval=None)
    middleware = CancellationMiddleware(
        build_sdk_app(log, json_response=True, stateless_http=False), registry=registry
    )
    assert middleware.sessions is not None
    with UvicornThread(middleware, proxy_headers=False) as server:
        url = server.url + "/mcp"
        async with Client(url, mode="legacy") as client:
            assert not (await client.call_tool("echo", {"text": "hi"})).is_error
            transport = middleware._transport
            assert transport is not None
            table = transport.manager._server_instances
            assert isinstance(table, dict)
            (session_id,) = table
            assert transport.session_open(session_id) is True
            assert len(middleware.sessions) == 0  # no second copy
        # The client's DELETE ended the session.
        await async_wait_until(lambda: transport.session_open(session_id) is False)
    await registry.aclose()


async def open_session(http: httpx.AsyncClient, url: str) -> dict[str, str]:
    """A new session of a stateful server, raw: the headers its requests carry."""
    headers = {**SSE_AND_JSON, "mcp-protocol-version": HANDSHAKE}
    params = {
        "protocolVersion": HANDSHAKE,
        "capabilities": {},
        "clientInfo": {"name": "flood", "version": "1"},
    }
    answer = await http.post(
        url,
        json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params},
        headers=headers,
    )
    assert answer.status_code == 200, answer.text
    headers["mcp-session-id"] = answer.headers["mcp-session-id"]
    done = await http.post(
        url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers
    )
    assert done.status_code == 202
    return headers


async def test_a_flood_of_sessions_never_makes_two_sessions_share_a_scope(
    serve: Serve, http: httpx.AsyncClient
) -> None:
    """However many sessions were opened since, two sessions at one address stay apart:
    the victim's call is not cancelled by another session naming its id."""
    harness = serve("sdk", json_response=True, stateless=False)
    server: Any = harness.server.config.app
    assert server.sessions is not None
    server.sessions.limit = 1  # (a learned copy this small would forget at once)
    victim = await open_session(http, harness.url)
    attacker = await open_session(http, harness.url)
    for _ in range(5):
        await open_session(http, harness.url)
    answers: dict[str, Any] = {}

    async def call() -> None:
        answer = await http.post(
            harness.url, json=call_body(7, "poll", {"seconds": 2}), headers=victim
        )
        answers["victim"] = answer.json()

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        await harness.wait_started()
        refused = await http.post(harness.url, json=cancel_body(7), headers=attacker)
        assert refused.status_code == 202  # (MCP: an unknown id is ignored)
    assert "result" in answers["victim"], answers  # ran to its end
    assert harness.cancellations == []
    await harness.wait_empty()


def test_issued_sessions_are_bounded_least_recently_used_first() -> None:
    sessions = IssuedSessions(limit=2)
    sessions.learn(b"a")
    sessions.learn(b"b")
    assert sessions.known("a")  # a is now the most recently used
    sessions.learn(b"c")
    assert (sessions.known("a"), sessions.known("b"), sessions.known("c")) == (True, False, True)
    sessions.learn(b"x" * 257)  # longer than any id the middleware keeps
    sessions.learn(b"")
    assert len(sessions) == 2
    sessions.forget("a")
    sessions.forget("never issued")
    assert not sessions.known("a")
    assert len(sessions) == 1


async def test_with_issued_sessions_off_a_session_is_scoped_by_its_address(
    serve: Serve,
) -> None:
    harness = serve("sdk", json_response=False, stateless=False, issued_sessions=False)
    async with Client(harness.url, mode="legacy") as client:
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call_tool, "poll", {"seconds": 30})
            await harness.wait_started()
            tg.cancel_scope.cancel()  # the client POSTs notifications/cancelled
        await async_wait_until(lambda: len(harness.cancellations) == 1)
    assert harness.cancellations[0]["scope"] == "ip:127.0.0.1"
    await harness.wait_empty()


@pytest.mark.parametrize("json_response", [False, True], ids=["sse", "json"])
async def test_a_stateful_servers_refusals_stand(
    serve: Serve, http: httpx.AsyncClient, flavour: str, json_response: bool
) -> None:
    """In front of a stateful server the SDK answers a notification first: one without a
    session id gets its 400, one naming a session it does not know its 404, and neither
    is recorded (a live session's own notifications: the tests above)."""
    harness = serve(flavour, json_response=json_response, stateless=False)
    async with Client(harness.url, mode="legacy") as client, anyio.create_task_group() as tg:
        tg.start_soon(client.call_tool, "hold", {"key": "k"})
        (key,) = await harness.wait_started()
        missing = await http.post(harness.url, json=cancel_body(int(key)), headers=SSE_AND_JSON)
        assert missing.status_code == 400, missing.text
        unknown = await http.post(
            harness.url,
            json=cancel_body(int(key)),
            headers={**SSE_AND_JSON, "mcp-session-id": "f" * 32},
        )
        assert unknown.status_code == 404, unknown.text
        assert harness.cancellations == []
        harness.log.release("k")
    await harness.wait_empty()


async def test_a_stateful_servers_202_stands_when_the_registry_refuses_the_row(
    serve: Serve, http: httpx.AsyncClient
) -> None:
    """The SDK's own cancellation of a stateful session's call runs whatever the
    registry says: with the storage down the row is not written, the call still stops,
    and the client gets the SDK's 202, not a 503 asking it to try again."""
    storage = FlakyStorage()
    registry = CancellationRegistry(storage, janitor_interval=None)
    harness = serve("sdk", json_response=True, stateless=False, registry=registry)
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        },
    }
    answer = await http.post(harness.url, json=init, headers=SSE_AND_JSON)
    session = {**SSE_AND_JSON, "mcp-session-id": answer.headers["mcp-session-id"]}
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (await http.post(harness.url, json=initialized, headers=session)).status_code == 202

    async def call() -> None:
        await http.post(harness.url, json=call_body(1, "hold", {"key": "k"}), headers=session)

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        await harness.wait_started()
        storage.down = True
        cancel = await http.post(harness.url, json=cancel_body(1), headers=session)
        assert cancel.status_code == 202, cancel.text
        # The SDK cancels the handler itself; hold would ignore the registry's flag.
        await harness.wait_outcome("1", "killed")
    assert harness.cancellations == []  # nothing recorded
    storage.down = False
    await harness.wait_empty()


@pytest.mark.parametrize(
    "request_id", [1.5, True, "z" * 300, None], ids=["float", "bool", "300 bytes", "null"]
)
async def test_a_stateful_server_gets_the_same_32602_for_an_invalid_id(
    serve: Serve, http: httpx.AsyncClient, request_id: object
) -> None:
    """A notification whose id no row can have is refused by the middleware (-32602, id
    null), before the SDK sees it, on a stateful server as on a stateless one."""
    harness = serve("sdk", json_response=True, stateless=False)
    headers = {**SSE_AND_JSON, "mcp-session-id": "f" * 32}
    rejected: list[str] = []

    def record(sender: object, **kwargs: Any) -> None:
        rejected.append(kwargs["reason"])

    with signals.cancellation_rejected.connected_to(record, sender=harness.registry):
        answer = await http.post(harness.url, json=cancel_body(request_id), headers=headers)
    assert answer.status_code == 400, answer.text
    assert answer.json()["id"] is None
    assert answer.json()["error"]["code"] == -32602
    # Reported as the abuse it is, as a stateless server's registry reports it.
    assert rejected == ([] if request_id is None else ["invalid_request_id"])
