"""Real servers for the middleware tests: the SDK's ``MCPServer`` or FastMCP, stateless
Streamable HTTP, behind :class:`CancellationMiddleware`, served by uvicorn on 127.0.0.1.

Tools record what happened to each request id in a thread-safe :class:`ToolLog` (the tools
run on the server thread, the tests on their own loop):

``poll(seconds)``   polls ``raise_if_cancelled()`` every 20 ms (``cancelled`` when it stops)
``stuck(seconds)``  never polls (``killed`` when its task is cancelled)
``hold(key)``       runs until the test releases *key*, ignoring cancellation
``echo(text)``      returns at once"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx

from mcp_cancellation import (
    REQUEST_CANCELLED,
    CancellationRegistry,
    StorageUnavailable,
    current_token,
)
from mcp_cancellation.storage import StorageStats
from mcp_cancellation.storage._base import AddResult, Storage
from mcp_cancellation.storage._memory import MemoryStorage

from ..jsonrpc import SSE_AND_JSON, call_body, cancel_body, final_message, versioned_call
from ..support import UvicornThread, async_wait_until

POLL = 0.02


STREAM_CANCEL_TIMEOUT = 0.3


class ToolLog:
    """What the tools did, per request id (keys as the middleware normalised them)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.outcomes: dict[str, list[str]] = {}
        self._released: set[str] = set()

    def mark(self, request_id: str, outcome: str) -> None:
        with self._lock:
            self.outcomes.setdefault(request_id, []).append(outcome)

    def last(self, request_id: str) -> str | None:
        with self._lock:
            events = self.outcomes.get(request_id)
            return events[-1] if events else None

    def clear(self) -> None:
        """Forget every outcome (before a request id is used again)."""
        with self._lock:
            self.outcomes.clear()

    def started(self) -> list[str]:
        with self._lock:
            return [key for key, events in self.outcomes.items() if "started" in events]

    def release(self, key: str) -> None:
        with self._lock:
            self._released.add(key)

    def released(self, key: str) -> bool:
        with self._lock:
            return key in self._released


def _request_key() -> str:
    token = current_token()
    return token.request_id if token is not None else "untracked"


@contextlib.contextmanager
def _marked(log: ToolLog) -> Iterator[str]:
    """Mark the current request ``started``, then how its tool ended: ``completed``,
    ``cancelled`` (a cancellation raised in it) or ``killed`` (its task was cancelled)."""
    key = _request_key()
    log.mark(key, "started")
    try:
        yield key
    except anyio.get_cancelled_exc_class():
        log.mark(key, "killed")
        raise
    except BaseException:
        log.mark(key, "cancelled")
        raise
    log.mark(key, "completed")


async def poll_tool(log: ToolLog, seconds: float) -> str:
    with _marked(log):
        token = current_token()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if token is not None:
                token.raise_if_cancelled()
            await anyio.sleep(POLL)
    return "completed"


async def stuck_tool(log: ToolLog, seconds: float) -> str:
    with _marked(log):
        await anyio.sleep(seconds)
    return "completed"


async def hold_tool(log: ToolLog, key: str) -> str:
    with _marked(log):
        deadline = time.monotonic() + 30
        # released from the test's thread: poll, an anyio.Event is bound to one loop
        while not log.released(key) and time.monotonic() < deadline:  # noqa: ASYNC110
            await anyio.sleep(POLL)
    return "completed"


def tools(log: ToolLog) -> list[Callable[..., Awaitable[str]]]:
    """The four tools of the module docstring, recording in *log*."""

    async def poll(seconds: float) -> str:
        return await poll_tool(log, seconds)

    async def stuck(seconds: float) -> str:
        return await stuck_tool(log, seconds)

    async def hold(key: str) -> str:
        return await hold_tool(log, key)

    async def echo(text: str) -> str:
        return text

    return [poll, stuck, hold, echo]


#: Bearer tokens of the apps built with ``auth=True``: token -> OAuth client id.
TOKENS = {"alice-token": "alice", "bob-token": "bob"}


def build_sdk_app(log: ToolLog, *, auth: bool = False, **http_app: Any) -> Any:
    """The SDK's ``MCPServer`` with the test tools, as a Streamable HTTP app made with
    *http_app* (``streamable_http_app()``'s options; stateless unless they say otherwise);
    with *auth*, behind the SDK's bearer authentication (the :data:`TOKENS`)."""
    from mcp.server.mcpserver import MCPServer

    from mcp_cancellation.integrations._mcp_sdk import cancellable

    options: dict[str, Any] = {}
    if auth:
        from mcp.server.auth.provider import AccessToken
        from mcp.server.auth.settings import AuthSettings

        class Verifier:
            async def verify_token(self, token: str) -> AccessToken | None:
                client = TOKENS.get(token)
                return (
                    AccessToken(token=token, client_id=client, scopes=["mcp"]) if client else None
                )

        options["token_verifier"] = Verifier()
        options["auth"] = AuthSettings(
            issuer_url="https://auth.example.com",  # type: ignore[arg-type]
            resource_server_url="http://127.0.0.1/mcp",  # type: ignore[arg-type]
            required_scopes=["mcp"],
            validate_token_resource=False,
        )
    server = MCPServer("middleware-tests", log_level="WARNING", **options)

    for tool in tools(log):
        server.tool()(cancellable(tool) if tool.__name__ == "poll" else tool)
    return server.streamable_http_app(**{"stateless_http": True, **http_app})


def build_fastmcp_app(log: ToolLog, *, auth: bool = False, **http_app: Any) -> Any:
    """The same tools on FastMCP (``fastmcp_middleware()`` answers -32800), as an app
    made with *http_app* (``http_app()``'s options; stateless unless they say otherwise);
    with *auth*, behind FastMCP's bearer authentication (the :data:`TOKENS`)."""
    from fastmcp import FastMCP

    from mcp_cancellation.integrations.fastmcp import fastmcp_middleware

    verifier = None
    if auth:
        from fastmcp.server.auth.providers.jwt import StaticTokenVerifier

        verifier = StaticTokenVerifier(
            tokens={token: {"client_id": client, "scopes": []} for token, client in TOKENS.items()}
        )
    server = FastMCP("middleware-tests-fastmcp", middleware=[fastmcp_middleware()], auth=verifier)

    for tool in tools(log):
        server.tool(tool)
    return server.http_app(**{"path": "/mcp", "stateless_http": True, **http_app})


@dataclass
class Harness:
    """A running server and what the tests observe of it."""

    server: UvicornThread
    registry: CancellationRegistry
    log: ToolLog
    cancellations: list[dict[str, Any]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.server.url + "/mcp"

    def stats(self) -> StorageStats:
        storage = self.registry.storage
        assert isinstance(storage, MemoryStorage)
        return storage.stats_from_thread(0)

    async def wait_empty(self) -> None:
        """No row left behind: neither cancellations nor in-flight requests."""

        def empty() -> bool:
            stats = self.stats()
            return stats.total_rows == 0 and stats.total_in_flight == 0

        await async_wait_until(empty, within=10)

    async def wait_started(self, count: int = 1) -> list[str]:
        await async_wait_until(lambda: len(self.log.started()) >= count, within=10)
        return self.log.started()

    async def wait_outcome(self, request_id: str, *outcomes: str) -> str:
        await async_wait_until(lambda: self.log.last(request_id) in outcomes, within=10)
        outcome = self.log.last(request_id)
        assert outcome is not None
        return outcome


Serve = Callable[..., Harness]


async def start_and_cancel(
    harness: Any,
    starter: httpx.AsyncClient,
    canceller: httpx.AsyncClient,
    start_headers: dict[str, str],
    cancel_headers: dict[str, str],
    *,
    cancel: dict[str, Any] | None = None,
    seconds: float = 1,
) -> dict[str, Any]:
    """Start a ``poll`` of *seconds* as *starter*, send *cancel* (default: a cancel of
    it) as *canceller*; the call's answer."""
    answers: list[httpx.Response] = []

    async def call() -> None:
        answers.append(
            await starter.post(
                harness.url,
                json=call_body("job", "poll", {"seconds": seconds}),
                headers={**SSE_AND_JSON, **start_headers},
            )
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        await harness.wait_started()
        response = await canceller.post(
            harness.url,
            json=cancel_body("job") if cancel is None else cancel,
            headers={**SSE_AND_JSON, **cancel_headers},
        )
        assert response.status_code == 202
    return final_message(answers[0])


async def refused_then_cancelled(
    harness: Harness,
    http: httpx.AsyncClient,
    body: dict[str, Any] | bytes,
    headers: dict[str, str],
    status: int,
) -> httpx.Response:
    """Start a 30 s ``poll`` as request ``job``; POST *body* (JSON, or bytes as they are)
    with *headers*, which must be refused with *status* and record nothing while the call
    runs on; then the same caller's valid notification cancels the call. Returns the
    refusal."""
    answers: list[httpx.Response] = []

    async def call() -> None:
        answers.append(
            await http.post(
                harness.url, json=call_body("job", "poll", {"seconds": 30}), headers=SSE_AND_JSON
            )
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        await harness.wait_started()
        refused = await http.post(
            harness.url,
            headers={**SSE_AND_JSON, **headers},
            **({"content": body} if isinstance(body, bytes) else {"json": body}),
        )
        assert refused.status_code == status, refused.text
        assert harness.cancellations == []
        assert harness.log.last("job") == "started"
        accepted = await http.post(
            harness.url, json=cancel_body("job", "valid"), headers=SSE_AND_JSON
        )
        assert accepted.status_code == 202, accepted.text
    assert [c["reason"] for c in harness.cancellations] == ["valid"]
    assert final_message(answers[0])["error"]["data"] == {"reason": "valid"}
    await harness.wait_empty()
    return refused


@contextlib.asynccontextmanager
async def workers_sharing(
    url: str, count: int = 2, partitions: int = 1, **options: Any
) -> AsyncIterator[list[CancellationRegistry]]:
    """*count* registries on one Redis table at *url* (a fresh prefix; split in
    *partitions* if more than one; *options* for each storage), as *count* worker
    processes have; closed, with their connections and background tasks, at the end."""
    from mcp_cancellation.storage.redis import PartitionedRedisStorage, RedisStorage

    prefix = f"workers-{uuid.uuid4().hex[:8]}"

    def storage() -> Storage:
        if partitions > 1:
            return PartitionedRedisStorage.from_url(
                url, partitions=partitions, prefix=prefix, **options
            )
        return RedisStorage.from_url(url, prefix=prefix, **options)

    registries = [CancellationRegistry(storage(), janitor_interval=None) for _ in range(count)]
    try:
        yield registries
    finally:
        for registry in registries:
            await registry.aclose()


class FlakyStorage(MemoryStorage):
    """A memory storage whose backend "goes away" on demand (fault injection)."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False

    def _reachable(self) -> None:
        if self.down:
            raise StorageUnavailable("storage is down")

    async def add(self, *args: Any, **kwargs: Any) -> AddResult:
        self._reachable()
        return await super().add(*args, **kwargs)

    async def track(self, *args: Any, **kwargs: Any) -> None:
        self._reachable()
        await super().track(*args, **kwargs)


async def call_then_hang_up(
    harness: Harness,
    http: httpx.AsyncClient,
    version: str,
    tool: str,
    request_id: object,
    arguments: dict[str, Any] | None = None,
    before_hang_up: Callable[[str], Awaitable[None]] | None = None,
) -> str:
    """Start *tool*, wait until it runs (then await *before_hang_up* with its key), then
    close the connection; return its key."""
    body, headers = versioned_call(version, request_id, tool, arguments or {"seconds": 30})

    async def call() -> None:
        async with http.stream("POST", harness.url, json=body, headers=headers) as response:
            async for _ in response.aiter_bytes():
                pass

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        (key,) = await harness.wait_started()
        if before_hang_up is not None:
            await before_hang_up(key)
        tg.cancel_scope.cancel()  # abandons the response: httpx closes the connection
    return key


async def wait_disconnect_recorded(harness: Harness, key: str) -> None:
    await async_wait_until(lambda: len(harness.cancellations) >= 1, within=10)
    (recorded,) = harness.cancellations
    assert recorded["method"] == "disconnect"
    assert recorded["reason"] == "client disconnected"
    assert recorded["request_id"] == key
    assert recorded["scope"] == "ip:127.0.0.1"


async def cli(*args: str) -> tuple[int, str, str]:
    """``mcp-cancellation ARGS`` in a process of its own (the servers keep running)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "mcp_cancellation",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


class Calls:
    """Long ``poll`` calls running in the background; their answers once they end."""

    def __init__(self, tg: anyio.abc.TaskGroup) -> None:
        self._tg = tg
        self.answers: dict[str, dict[str, Any]] = {}

    def start(
        self, client: httpx.AsyncClient, harness: Harness, request_id: str, **headers: str
    ) -> None:
        async def call() -> None:
            response = await client.post(
                harness.url,
                json=call_body(request_id, "poll", {"seconds": 30}),
                headers={**SSE_AND_JSON, **headers},
            )
            self.answers[request_id] = final_message(response)

        self._tg.start_soon(call)

    async def ended(self, *request_ids: str) -> None:
        await async_wait_until(lambda: all(r in self.answers for r in request_ids), within=15)
        for request_id in request_ids:
            assert self.answers[request_id]["error"]["code"] == REQUEST_CANCELLED
