"""The populations of a simulation (clients, flood, hogs, ignorers, task clients) over raw
MCP Streamable HTTP, and the budget that bounds them (private)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
import sys
import time
from collections.abc import Callable
from typing import Any

from .._extras import requires
from ._config import PROTOCOL_VERSION, SimulationConfig, SimulationStats

with requires("mcp", "mcp-cancellation simulate"):
    import httpx

__all__ = ["KEEPALIVE_EXPIRY", "Simulation"]

#: JSON-RPC error codes the simulator tells apart.
REQUEST_CANCELLED = -32800
QUOTA_REACHED = -32000
INVALID_PARAMS = -32602

_FLOOD_CONNECTIONS = 32
#: Seconds an idle connection is kept for reuse. Well below the servers' keep-alive
#: timeout (uvicorn's default is 5 s, gunicorn's 2 s): with equal timeouts the server may
#: close a connection just as the client reuses it, which fails that request with
#: "Server disconnected without sending a response", more often on a loaded machine.
KEEPALIVE_EXPIRY = 1.0
#: Transport errors described on stderr before the simulator only counts them.
_REPORTED_ERRORS = 20

_HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": PROTOCOL_VERSION,
}


#: What a task client sends: protocol 2026-07-28, declaring the tasks extension per request.
_TASK_HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2026-07-28",
}
_TASK_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {
        "extensions": {"io.modelcontextprotocol/tasks": {}}
    },
}


def _address_pool(count: int) -> list[str]:
    """*count* distinct flood addresses: IPv4 documentation ranges, then IPv6 /64s."""
    pool: list[str] = []
    for network in ("198.51.100.", "203.0.113."):
        pool.extend(f"{network}{host}" for host in range(1, 255))
    pool.extend(f"2001:db8:{n >> 16:x}:{n & 0xFFFF:x}::1" for n in range(max(0, count - 508)))
    return pool[:count]


class _Budget:
    """Stops the run after the time limit or the request budget, whichever comes first."""

    def __init__(
        self, config: SimulationConfig, stats: SimulationStats, stop: asyncio.Event | None
    ) -> None:
        self.config = config
        self.stats = stats
        self.start = time.monotonic()
        self.stop = stop if stop is not None else asyncio.Event()

    def take(self) -> bool:
        """Count one HTTP request; false (and stop) when the run is over."""
        if self.stop.is_set():
            return False
        if (
            self.stats.requests >= self.config.max_requests
            or time.monotonic() - self.start >= self.config.duration
        ):
            self.stop.set()
            return False
        self.stats.requests += 1
        return True

    async def sleep(self, seconds: float) -> bool:
        """Sleep unless the run stops first; true when the run is still on."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), seconds)
        return not self.stop.is_set()


def _parse_messages(response: httpx.Response, body: bytes) -> list[dict[str, Any]]:
    """JSON-RPC messages of a response: a JSON body, or the ``data:`` of SSE events."""
    if not body:
        return []
    content_type = response.headers.get("content-type", "")
    texts: list[str] = []
    if content_type.startswith("text/event-stream"):
        data: list[str] = []
        for line in [*body.decode("utf-8", "replace").splitlines(), ""]:
            if line.startswith("data:"):
                data.append(line[5:].lstrip(" "))
            elif not line and data:
                texts.append("\n".join(data))
                data = []
    else:
        texts.append(body.decode("utf-8", "replace"))
    messages: list[dict[str, Any]] = []
    for text in texts:
        try:
            value = json.loads(text)
        except ValueError:
            continue
        if isinstance(value, dict):
            messages.append(value)
    return messages


class Simulation:
    def __init__(
        self, config: SimulationConfig, hog_calls: int, stop: asyncio.Event | None = None
    ) -> None:
        self.config = config
        self.hog_calls = hog_calls
        self.stats = SimulationStats(hog_calls=hog_calls)
        self.budget = _Budget(config, self.stats, stop)
        self.random = random.Random(config.seed)
        self.url = config.url
        self._task_ids = itertools.count(1)
        # The task clients' own draws: the other populations' stay what a seed gave them.
        self._task_random = random.Random(None if config.seed is None else config.seed + 1)

    async def _post(
        self, client: httpx.AsyncClient, address: str, payload: object
    ) -> tuple[int, list[dict[str, Any]]]:
        """POST one JSON-RPC message as *address*; (HTTP status, messages), or (0, [])."""
        headers = {**_HEADERS, "X-Forwarded-For": address}
        try:
            async with client.stream(
                "POST", self.url, headers=headers, content=json.dumps(payload)
            ) as response:
                body = await response.aread()
        except httpx.HTTPError as exc:
            self.stats.transport_errors += 1
            self._report_transport_error(payload, address, exc)
            return 0, []
        if response.status_code >= 500:
            self.stats.http_errors += 1
        return response.status_code, _parse_messages(response, body)

    def _report_transport_error(self, payload: object, address: str, exc: Exception) -> None:
        """Say on stderr what failed (the first few times), so that a count is explained."""
        if self.stats.transport_errors > _REPORTED_ERRORS:
            return
        method = payload.get("method") if isinstance(payload, dict) else None
        elapsed = time.monotonic() - self.budget.start
        print(
            f"mcp-cancellation simulate: {elapsed:.1f}s: {method} as {address} failed: "
            f"{type(exc).__name__}: {exc or '(no message)'}",
            file=sys.stderr,
            flush=True,
        )
        if self.stats.transport_errors == _REPORTED_ERRORS:
            print(
                "mcp-cancellation simulate: (further transport errors not shown)", file=sys.stderr
            )

    async def call(
        self, client: httpx.AsyncClient, address: str, request_id: int, tool: str, seconds: float
    ) -> None:
        """Call *tool* (``slow_count`` or the hog's) and count how it ended."""
        if not self.budget.take():
            return
        self.stats.calls_started += 1
        payload = {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "tools/call",
            "params": {"name": tool, "arguments": {"seconds": seconds}},
        }
        _, messages = await self._post(client, address, payload)
        answer = next((m for m in messages if m.get("id") == request_id), None)
        if answer is None:
            self.stats.calls_failed += 1
        elif isinstance(answer.get("result"), dict) and not answer["result"].get("isError"):
            self.stats.calls_completed += 1
        elif _error_code(answer) == REQUEST_CANCELLED or _mentions_cancel(answer):
            self.stats.calls_cancelled += 1
        else:
            self.stats.calls_failed += 1

    async def cancel(
        self, client: httpx.AsyncClient, address: str, request_id: object, *, flood: bool = False
    ) -> None:
        """Send ``notifications/cancelled`` for *request_id* as *address*."""
        if not self.budget.take():
            return
        if flood:
            self.stats.flood_sent += 1
        else:
            self.stats.cancels_sent += 1
        payload = {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": request_id, "reason": "simulated: user pressed stop"},
        }
        status, messages = await self._post(client, address, payload)
        codes = {_error_code(m) for m in messages}
        if QUOTA_REACHED in codes:
            self.stats.quota_rejected += 1
        elif INVALID_PARAMS in codes:
            self.stats.invalid_rejected += 1
        elif status == 202 and flood:
            self.stats.flood_ignored += 1
        elif status == 202:
            self.stats.cancels_accepted += 1

    async def well_behaved(self, client: httpx.AsyncClient, index: int) -> None:
        """Call a slow tool, usually cancel it from another POST of the same scope."""
        address = f"192.0.2.{10 + index}"
        seconds = self.config.call_seconds
        for request_id in itertools.count(1):
            call = asyncio.create_task(
                self.call(client, address, request_id, "slow_count", seconds)
            )
            wait = self.random.uniform(0.2, max(0.3, min(1.0, seconds * 0.8)))
            if not await self.budget.sleep(wait):
                await _finish(call)
                return
            if self.random.random() < self.config.cancel_share:
                await self.cancel(client, address, request_id)
            await _finish(call, stop=self.budget.stop)
            if not await self.budget.sleep(self.random.uniform(0.05, 0.3)):
                return

    async def hog(self, client: httpx.AsyncClient, index: int) -> None:
        """Keep more calls in flight than the quota allows and cancel them all, again and
        again: the scope sits at its quota and the surplus cancellations are rejected."""
        address = f"192.0.2.{200 + index}"
        ids = itertools.count(1)
        calls: dict[int, asyncio.Task[None]] = {}
        limit = asyncio.Semaphore(16)

        async def cancel(request_id: int) -> None:
            async with limit:
                await self.cancel(client, address, request_id)

        try:
            while not self.budget.stop.is_set():
                for request_id, task in list(calls.items()):
                    if task.done():
                        del calls[request_id]
                while len(calls) < self.hog_calls and not self.budget.stop.is_set():
                    request_id = next(ids)
                    # Staggered lengths, so the calls do not all end (and drain) together.
                    seconds = round(self.config.hog_call_seconds * self.random.uniform(0.5, 1), 1)
                    calls[request_id] = asyncio.create_task(
                        self.call(client, address, request_id, self.config.hog_tool, seconds)
                    )
                if not await self.budget.sleep(0.2):  # let the new calls reach the server
                    break
                await asyncio.gather(*(cancel(i) for i in list(calls)))
                if not await self.budget.sleep(self.config.hog_interval):
                    break
        finally:
            for task in calls.values():
                task.cancel()  # closing the stream cancels the call on the server too
            await asyncio.gather(*calls.values(), return_exceptions=True)

    async def ignorer(self, client: httpx.AsyncClient, index: int) -> None:
        """Call a tool that ignores cancellation, cancel the call from another POST half a
        second later, and wait for it to end anyway (it completes): the server shows it in
        ``ignored_cancellations`` after its grace period, by tool."""
        address = f"192.0.2.{100 + index}"
        seconds = self.config.ignorer_call_seconds
        for request_id in itertools.count(1):
            call = asyncio.create_task(
                self.call(client, address, request_id, self.config.ignorer_tool, seconds)
            )
            if not await self.budget.sleep(0.5):
                await _finish(call)
                return
            await self.cancel(client, address, request_id)
            self.stats.ignored_calls += 1
            await _finish(call, stop=self.budget.stop)
            if self.budget.stop.is_set():
                return

    async def _task_request(
        self, client: httpx.AsyncClient, address: str, method: str, params: dict[str, Any]
    ) -> dict[str, Any] | None:
        """One request at protocol 2026-07-28 that declares the tasks extension; the
        answer's ``result``, or ``None``."""
        if not self.budget.take():
            return None
        payload = {
            "jsonrpc": "2.0",
            "id": next(self._task_ids),
            "method": method,
            "params": {**params, "_meta": _TASK_META},
        }
        headers = {**_TASK_HEADERS, "Mcp-Method": method, "X-Forwarded-For": address}
        if method == "tools/call":
            headers["Mcp-Name"] = str(params["name"])
        try:
            response = await client.post(self.url, headers=headers, content=json.dumps(payload))
        except httpx.HTTPError as exc:
            self.stats.transport_errors += 1
            self._report_transport_error(payload, address, exc)
            return None
        if response.status_code >= 500:
            self.stats.http_errors += 1
        messages = _parse_messages(response, response.content)
        result = next((m.get("result") for m in messages if "result" in m), None)
        return result if isinstance(result, dict) else None

    async def task_client(self, client: httpx.AsyncClient, index: int) -> None:
        """Run ``slow_count`` as a task (SEP-2663): create it, poll ``tasks/get`` at its
        interval, and (``cancel_share`` of the time) stop it with ``tasks/cancel``."""
        address = f"192.0.2.{150 + index}"
        seconds = self.config.call_seconds
        while not self.budget.stop.is_set():
            created = await self._task_request(
                client,
                address,
                "tools/call",
                {"name": "slow_count", "arguments": {"seconds": seconds}},
            )
            if created is None:
                if not await self.budget.sleep(0.5):
                    return
                continue
            if created.get("resultType") != "task":
                return  # a server without tasks ran it as a plain call: nothing to simulate
            self.stats.tasks_created += 1
            task = {"taskId": created["taskId"]}
            interval = max(0.05, int(created.get("pollIntervalMs", 500)) / 1000)
            draw = self._task_random
            cancel_at = time.monotonic() + draw.uniform(0.3, max(0.4, seconds * 0.8))
            cancelling = draw.random() < self.config.cancel_share
            while True:
                if not await self.budget.sleep(interval):
                    return
                if cancelling and time.monotonic() >= cancel_at:
                    await self._task_request(client, address, "tasks/cancel", task)
                    cancelling = False
                found = await self._task_request(client, address, "tasks/get", task)
                status = found.get("status") if found is not None else None
                if status == "completed":
                    self.stats.tasks_completed += 1
                    break
                if status in ("cancelled", "failed") or found is None:
                    self.stats.tasks_cancelled += status == "cancelled"
                    break
            if not await self.budget.sleep(self._task_random.uniform(0.05, 0.3)):
                return

    async def flood(self, client: httpx.AsyncClient) -> None:
        """``notifications/cancelled`` for ids 1..N from many addresses, at a fixed rate."""
        if self.config.flood_rate <= 0 or self.config.flood_addresses == 0:
            return
        pool = _address_pool(self.config.flood_addresses)
        interval = 1.0 / self.config.flood_rate
        limit = asyncio.Semaphore(_FLOOD_CONNECTIONS)
        pending: set[asyncio.Task[None]] = set()
        ids = itertools.cycle(range(1, self.config.flood_max_id + 1))

        async def one(address: str, request_id: object) -> None:
            try:
                await self.cancel(client, address, request_id, flood=True)
            finally:
                limit.release()

        next_at = time.monotonic()
        while not self.budget.stop.is_set():
            request_id: object = next(ids)
            if self.random.random() < self.config.flood_invalid_share:
                request_id = self.random.choice([True, 1.5, "x" * 300, {"id": 1}])
            await limit.acquire()  # back-pressure: at most _FLOOD_CONNECTIONS outstanding
            task = asyncio.create_task(one(self.random.choice(pool), request_id))
            pending.add(task)
            task.add_done_callback(pending.discard)
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0 and not await self.budget.sleep(delay):
                break
            if delay <= -1.0:  # fell behind (server slower than the rate): do not burst
                next_at = time.monotonic()
        await asyncio.gather(*pending, return_exceptions=True)

    async def run(self, on_progress: Callable[[SimulationStats, float], None] | None) -> None:
        longest = max(
            self.config.call_seconds, self.config.hog_call_seconds, self.config.ignorer_call_seconds
        )
        timeout = httpx.Timeout(longest + 15, connect=5)

        def client(connections: int) -> httpx.AsyncClient:
            # One small pool per caller: httpx scans its whole pool on every request.
            return httpx.AsyncClient(
                limits=httpx.Limits(max_connections=connections, keepalive_expiry=KEEPALIVE_EXPIRY),
                timeout=timeout,
                trust_env=False,
            )

        async with contextlib.AsyncExitStack() as stack:
            tasks: list[asyncio.Task[None]] = []
            for i in range(self.config.clients):
                c = await stack.enter_async_context(client(4))
                tasks.append(asyncio.create_task(self.well_behaved(c, i)))
            for i in range(self.config.hogs):
                c = await stack.enter_async_context(client(self.hog_calls + 16))
                tasks.append(asyncio.create_task(self.hog(c, i)))
            for i in range(self.config.ignorers):
                c = await stack.enter_async_context(client(4))
                tasks.append(asyncio.create_task(self.ignorer(c, i)))
            for i in range(self.config.task_clients):
                c = await stack.enter_async_context(client(2))
                tasks.append(asyncio.create_task(self.task_client(c, i)))
            c = await stack.enter_async_context(client(_FLOOD_CONNECTIONS))
            tasks.append(asyncio.create_task(self.flood(c)))
            try:
                while not self.budget.stop.is_set():
                    elapsed = time.monotonic() - self.budget.start
                    self.stats.elapsed = elapsed
                    if on_progress is not None:
                        on_progress(self.stats, min(1.0, elapsed / self.config.duration))
                    if elapsed >= self.config.duration:
                        self.budget.stop.set()
                        break
                    await self.budget.sleep(0.2)
                await asyncio.wait_for(asyncio.gather(*tasks), timeout=15)
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                self.stats.elapsed = time.monotonic() - self.budget.start
                if on_progress is not None:
                    on_progress(self.stats, 1.0)


def _error_code(message: dict[str, Any]) -> int | None:
    error = message.get("error")
    if isinstance(error, dict) and isinstance(error.get("code"), int):
        code: int = error["code"]
        return code
    return None


def _mentions_cancel(message: dict[str, Any]) -> bool:
    """A tool result flagged as an error whose text says it was cancelled."""
    result = message.get("result")
    return isinstance(result, dict) and "cancel" in json.dumps(result).lower()


async def _finish(task: asyncio.Task[None], stop: asyncio.Event | None = None) -> None:
    """Await *task*, or cancel it (closing its stream) once the run stops."""
    if stop is None:
        task.cancel()
    else:
        stopper = asyncio.create_task(stop.wait())
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        if not task.done():
            task.cancel()
    await asyncio.gather(task, return_exceptions=True)
