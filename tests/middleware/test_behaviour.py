"""The middleware's contract beyond cancellation itself: configuration, lifespan, body
re-injection, streaming, scopes (sessions, principals, proxies), quota and storage
failures."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Collection
from typing import Any

import anyio
import httpx
import pytest

from mcp_cancellation import (
    CancellationMiddleware,
    CancellationRegistry,
    ConfigurationError,
    MemoryStorage,
    StorageUnavailable,
)
from mcp_cancellation.scope import SESSION_KEY
from mcp_cancellation.storage.base import AddResult, Limits
from mcp_cancellation.token import RequestToken

from ..support import UvicornThread, async_wait_until, stats_now
from .conftest import (
    SSE_AND_JSON,
    Serve,
    ToolLog,
    build_sdk_app,
    call_body,
    cancel_body,
    final_message,
)

pytestmark = pytest.mark.e2e

Scope = dict[str, Any]


async def _noop_app(scope: Any, receive: Any, send: Any) -> None:  # pragma: no cover
    return None


# -- configuration -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {"trusted_proxies": ["not-a-network"]},
        {"trusted_proxies": ["10.0.0.0/33"]},
        {"stream_cancel_timeout": -1},
        {"stream_cancel_timeout": float("inf")},
        {"stream_cancel_timeout": "10"},
        {"max_body_bytes": 0},
        {"max_body_bytes": 1.5},
        {"path": "mcp"},
        {"session_resolver": "not callable"},
    ],
)
def test_bad_configuration_is_rejected_at_construction(options: dict[str, Any]) -> None:
    registry = CancellationRegistry(MemoryStorage(), janitor_interval=None)
    with pytest.raises(ConfigurationError):
        CancellationMiddleware(_noop_app, registry=registry, **options)


def test_trusted_proxies_normalised() -> None:
    registry = CancellationRegistry(MemoryStorage(), janitor_interval=None)
    middleware = CancellationMiddleware(
        _noop_app, registry=registry, trusted_proxies=["127.0.0.1", "10.1.2.3/8", "::1"]
    )
    assert middleware.trusted_proxies == ("127.0.0.1/32", "10.0.0.0/8", "::1/128")


@pytest.mark.parametrize(
    "client",
    [
        ("127.0.0.1", 1),
        ("::ffff:192.0.2.7", 2),
        ("2001:db8:1:2:3:4:5:6", 3),
        ("fe80::1%eth0", 4),
        ("not an address", 5),
        None,
    ],
)
@pytest.mark.parametrize("trusted", [(), ("127.0.0.1",)])
def test_caller_scope_matches_scope_of(
    client: tuple[str, int] | None, trusted: tuple[str, ...]
) -> None:
    from mcp_cancellation import scope_of

    registry = CancellationRegistry(MemoryStorage(), janitor_interval=None)
    middleware = CancellationMiddleware(_noop_app, registry=registry, trusted_proxies=trusted)
    scope: Scope = {
        "type": "http",
        "client": client,
        "headers": [(b"x-forwarded-for", b"198.51.100.9")],
    }
    assert middleware.caller_scope(dict(scope)) == scope_of(scope, trusted_proxies=trusted)


# -- lifespan ------------------------------------------------------------------------------


def test_lifespan_starts_and_stops_the_janitor() -> None:
    registry = CancellationRegistry(MemoryStorage(), janitor_interval=30)
    app = CancellationMiddleware(build_sdk_app(ToolLog(), json_response=True), registry=registry)
    server = UvicornThread(app)
    with server:
        assert registry.janitor_running
    assert not registry.janitor_running


# -- the body and the response stream ------------------------------------------------------


class RecordingApp:
    """A plain ASGI app: records the body it receives, then streams two chunks, the second
    only once the test has read the first (a buffering middleware would deadlock)."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.first_read = threading.Event()
        self.tokens: list[Any] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        from mcp_cancellation import current_token

        self.tokens.append(current_token())
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        self.bodies.append(body)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"first;", "more_body": True})
        for _ in range(500):
            if self.first_read.is_set():
                break
            await asyncio.sleep(0.01)
        await send({"type": "http.response.body", "body": b"second", "more_body": False})


@pytest.mark.parametrize(
    "body",
    [
        call_body(1, "echo", {"text": "é" * 3000}),  # tracked
        cancel_body("unknown"),  # answered by the middleware... not for this app: see below
        {"jsonrpc": "2.0", "method": "notifications/initialized"},  # passed through
    ],
)
async def test_body_reinjected_exactly_and_response_streamed(body: dict[str, Any]) -> None:
    import json

    registry = CancellationRegistry(MemoryStorage(), janitor_interval=None)
    inner = RecordingApp()
    raw = json.dumps(body, ensure_ascii=False).encode()

    async def chunks() -> Any:
        for start in range(0, len(raw), 1000):
            yield raw[start : start + 1000]

    with UvicornThread(CancellationMiddleware(inner, registry=registry)) as server:
        async with (
            httpx.AsyncClient(timeout=20) as client,
            client.stream(
                "POST", server.url + "/mcp", content=chunks(), headers=SSE_AND_JSON
            ) as response,
        ):
            if body.get("method") == "notifications/cancelled":
                assert response.status_code == 202  # the middleware answers it
                assert inner.bodies == []
                return
            stream = response.aiter_raw()
            first = await anext(stream)
            assert first == b"first;"
            inner.first_read.set()
            rest = b"".join([chunk async for chunk in stream])
            assert rest == b"second"
    assert inner.bodies == [raw]
    tracked = "id" in body
    assert (inner.tokens[0] is not None) is tracked
    # The answer can arrive before the handler released its row: wait for the release.
    await async_wait_until(
        lambda: stats_now(registry).total_in_flight == 0,
        within=10,
    )


async def test_oversized_body_is_refused_with_413(serve: Serve, http: httpx.AsyncClient) -> None:
    harness = serve("sdk", json_response=True, max_body_bytes=1000)
    body = cancel_body(1, "x" * 2000)
    response = await http.post(harness.url, json=body, headers=SSE_AND_JSON)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == -32600

    async def chunked() -> Any:  # no content-length: counted while reading
        for _ in range(3):
            yield b"x" * 600

    response = await http.post(harness.url, content=chunked(), headers=SSE_AND_JSON)
    assert response.status_code == 413


# -- scopes --------------------------------------------------------------------------------


async def _start_and_cancel(
    harness: Any,
    starter: httpx.AsyncClient,
    canceller: httpx.AsyncClient,
    start_headers: dict[str, str],
    cancel_headers: dict[str, str],
) -> dict[str, Any]:
    """Start ``hold`` as *starter*, send a cancel as *canceller*, release; the answer."""
    answers: list[httpx.Response] = []

    async def call() -> None:
        answers.append(
            await starter.post(
                harness.url,
                json=call_body("job", "poll", {"seconds": 1}),
                headers={**SSE_AND_JSON, **start_headers},
            )
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        await harness.wait_started()
        response = await canceller.post(
            harness.url, json=cancel_body("job"), headers={**SSE_AND_JSON, **cancel_headers}
        )
        assert response.status_code == 202
    return final_message(answers[0])


async def test_trusted_proxy_headers_separate_clients(
    serve: Serve, http: httpx.AsyncClient
) -> None:
    harness = serve("sdk", json_response=True, trusted_proxies=["127.0.0.1"])
    alice = {"x-forwarded-for": "203.0.113.7"}
    mallory = {"x-forwarded-for": "203.0.113.8"}
    answer = await _start_and_cancel(harness, http, http, alice, mallory)
    assert "result" in answer  # mallory's cancel did not touch alice's request
    assert harness.cancellations == []
    harness.log.outcomes.clear()
    answer = await _start_and_cancel(harness, http, http, alice, alice)
    assert answer["error"]["code"] == -32800
    assert harness.cancellations[0]["scope"] == "ip:203.0.113.7"
    await harness.wait_empty()


async def test_untrusted_proxy_headers_are_ignored(serve: Serve, http: httpx.AsyncClient) -> None:
    harness = serve("sdk", json_response=True)  # no trusted proxies
    answer = await _start_and_cancel(
        harness, http, http, {"x-forwarded-for": "203.0.113.7"}, {"x-forwarded-for": "198.51.100.1"}
    )
    assert answer["error"]["code"] == -32800  # both are 127.0.0.1, whatever they claim
    assert harness.cancellations[0]["scope"] == "ip:127.0.0.1"


async def test_session_resolver_scopes_by_validated_session(
    serve: Serve, http: httpx.AsyncClient
) -> None:
    valid = {"s-alice", "s-bob"}

    def resolver(scope: Scope) -> str | None:
        for name, value in scope.get("headers") or ():
            if name == b"x-test-session" and value.decode() in valid:
                return str(value.decode())
        return None

    harness = serve("sdk", json_response=True, session_resolver=resolver)
    alice = {"x-test-session": "s-alice"}
    answer = await _start_and_cancel(harness, http, http, alice, {"x-test-session": "s-bob"})
    assert "result" in answer
    harness.log.outcomes.clear()
    answer = await _start_and_cancel(harness, http, http, alice, {"x-test-session": "forged"})
    assert "result" in answer  # an unvalidated session falls back to the IP scope
    harness.log.outcomes.clear()
    answer = await _start_and_cancel(harness, http, http, alice, alice)
    assert answer["error"]["code"] == -32800
    assert harness.cancellations[0]["scope"] == "session:s-alice"
    assert SESSION_KEY.startswith("mcp_cancellation.")
    await harness.wait_empty()


async def test_sdk_authenticated_principal_is_the_scope(http: httpx.AsyncClient) -> None:
    """With ``install()``, the SDK's bearer authentication runs first: the principal
    (OAuth client id) is the scope, so two users behind one address stay apart."""
    from mcp.server.auth.provider import AccessToken
    from mcp.server.auth.settings import AuthSettings
    from mcp.server.mcpserver import MCPServer

    from mcp_cancellation.integrations.mcp_sdk import cancellable

    from .conftest import poll_tool

    class Verifier:
        async def verify_token(self, token: str) -> AccessToken | None:
            if token in ("alice-token", "bob-token"):
                return AccessToken(token=token, client_id=token.split("-")[0], scopes=["mcp"])
            return None

    log = ToolLog()
    server = MCPServer(
        "auth-test",
        log_level="WARNING",
        token_verifier=Verifier(),
        auth=AuthSettings(
            issuer_url="https://auth.example.com",  # type: ignore[arg-type]
            resource_server_url="http://127.0.0.1/mcp",  # type: ignore[arg-type]
            required_scopes=["mcp"],
            validate_token_resource=False,
        ),
    )

    @server.tool()
    @cancellable
    async def poll(seconds: float) -> str:
        return await poll_tool(log, seconds)

    app = server.streamable_http_app(stateless_http=True, json_response=True)
    registry = CancellationMiddleware.install(
        app, registry=CancellationRegistry(MemoryStorage(), janitor_interval=None)
    )
    recorded: list[dict[str, Any]] = []

    def record(sender: Any, **kwargs: Any) -> None:
        recorded.append(kwargs)

    from mcp_cancellation import signals

    signals.request_cancelled.connect(record, sender=registry, weak=False)
    try:
        with UvicornThread(app) as uv:

            class H:
                url = uv.url + "/mcp"

                @staticmethod
                async def wait_started() -> None:
                    await async_wait_until(lambda: bool(log.started()), within=10)

            alice = {"authorization": "Bearer alice-token"}
            bob = {"authorization": "Bearer bob-token"}
            answer = await _start_and_cancel(H, http, http, alice, bob)
            assert "result" in answer
            assert recorded == []
            log.outcomes.clear()
            answer = await _start_and_cancel(H, http, http, alice, alice)
            assert answer["error"]["code"] == -32800
            assert recorded[0]["scope"] == "principal:alice"
    finally:
        signals.request_cancelled.disconnect(record, sender=registry)


async def test_modern_notification_is_left_to_the_sdk(
    serve: Serve, http: httpx.AsyncClient
) -> None:
    """At 2026-07-28 there are no client notifications on HTTP (the SDK acknowledges and
    drops them); cancelling is closing the stream."""
    harness = serve("sdk", json_response=True)
    answer = await _start_and_cancel(
        harness, http, http, {}, {"mcp-protocol-version": "2026-07-28"}
    )
    assert "result" in answer
    assert harness.cancellations == []


# -- quota and storage failures ------------------------------------------------------------


async def test_quota_answers_32000(serve: Serve, http: httpx.AsyncClient) -> None:
    registry = CancellationRegistry(MemoryStorage(), janitor_interval=None, max_rows_per_scope=1)
    harness = serve("sdk", json_response=True, registry=registry)
    answers: list[httpx.Response] = []

    async def call(request_id: str) -> None:
        answers.append(
            await http.post(
                harness.url, json=call_body(request_id, "hold", {"key": "q"}), headers=SSE_AND_JSON
            )
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(call, "a")
        tg.start_soon(call, "b")
        await harness.wait_started(2)
        first = await http.post(harness.url, json=cancel_body("a"), headers=SSE_AND_JSON)
        assert first.status_code == 202
        second = await http.post(harness.url, json=cancel_body("b"), headers=SSE_AND_JSON)
        assert second.status_code == 429
        assert second.json() == {
            "jsonrpc": "2.0",
            "id": None,
            "error": {
                "code": -32000,
                "message": "Too many outstanding cancellations; try again shortly.",
            },
        }
        harness.log.release("q")
    await harness.wait_empty()


class FlakyStorage(MemoryStorage):
    """A memory storage whose backend "goes away" on demand (fault injection).

    It fails through the async face only, so it declares itself not synchronous: the
    registry then uses that face, as it does for any storage behind a server.
    """

    synchronous = False

    def __init__(self) -> None:
        super().__init__()
        self.down = False

    async def add(
        self,
        scope: str,
        key: str,
        reason: str | None,
        *,
        limits: Limits,
        require_in_flight: bool = False,
    ) -> AddResult:
        if self.down:
            raise StorageUnavailable("storage is down")
        return await super().add(
            scope, key, reason, limits=limits, require_in_flight=require_in_flight
        )

    async def track(self, scope: str, key: str, owner: str, token: RequestToken) -> None:
        if self.down:
            raise StorageUnavailable("storage is down")
        await super().track(scope, key, owner, token)

    async def cleanup(self, ttl: float | None, dead_owners: Collection[str]) -> tuple[int, int]:
        return await super().cleanup(ttl, dead_owners)


async def test_storage_down_cancel_answers_error_not_500(
    serve: Serve, http: httpx.AsyncClient
) -> None:
    storage = FlakyStorage()
    registry = CancellationRegistry(storage, janitor_interval=None)
    harness = serve("sdk", json_response=True, registry=registry)
    storage.down = True
    response = await http.post(harness.url, json=cancel_body(1), headers=SSE_AND_JSON)
    assert response.status_code == 503
    assert response.json()["error"] == {
        "code": -32603,
        "message": "Cancellation storage unavailable; try again shortly.",
    }
    # Requests are still served while the storage is down.
    response = await http.post(
        harness.url, json=call_body(2, "echo", {"text": "up"}), headers=SSE_AND_JSON
    )
    assert "up" in response.text


async def test_storage_down_disconnect_still_stops_the_tool(
    serve: Serve, http: httpx.AsyncClient
) -> None:
    storage = FlakyStorage()
    registry = CancellationRegistry(storage, janitor_interval=None)
    harness = serve("sdk", json_response=True, registry=registry, stream_cancel_timeout=None)

    async def call() -> None:
        await http.post(
            harness.url, json=call_body("d", "poll", {"seconds": 30}), headers=SSE_AND_JSON
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        (key,) = await harness.wait_started()
        storage.down = True
        tg.cancel_scope.cancel()
    # A disconnect writes nothing to the storage: the token flipped, the tool stopped.
    assert await harness.wait_outcome(key, "cancelled", "completed") == "cancelled"
    assert [c["method"] for c in harness.cancellations] == ["disconnect"]
    storage.down = False
    await harness.wait_empty()


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
