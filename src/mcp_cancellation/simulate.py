"""``mcp-cancellation simulate``: well-behaved and abusive cancellation traffic, on loopback.

Drives a server running behind :class:`~mcp_cancellation.CancellationMiddleware` (normally
``mcp-cancellation demo --trusted-proxy 127.0.0.1``) over raw MCP Streamable HTTP, so that
its metrics, dashboards and alerts have something to show. Three populations run at once,
each caller in its own scope through ``X-Forwarded-For`` (addresses from the documentation
ranges of RFC 5737 and RFC 3849):

* **clients** (``192.0.2.0/24``): each calls ``slow_count`` and, most of the time, cancels
  its own call with ``notifications/cancelled`` sent on another POST from the same address,
  as a real client whose user pressed "stop" would. Their ids start at 1, like every SDK
  client's, so they collide with everyone else's ids, which is harmless across scopes.
* **flood** (``198.51.100.0/24``, ``203.0.113.0/24`` and ``2001:db8::/32`` /64s): a stream of
  ``notifications/cancelled`` for ids 1..1000 from many addresses, aimed at other callers'
  requests. The middleware only records a cancellation for a request in flight in the
  caller's own scope, so these are answered 202 and ignored: that is the defence working.
  A small share carries an invalid id, which is rejected (``invalid_request_id``).
* **hogs** (``192.0.2.200`` and up): each keeps more slow calls in flight in its one scope
  than the per-scope quota allows and cancels them all in bursts, so its scope sits at the
  quota and the surplus cancellations are rejected (``quota``, JSON-RPC -32000).

Everything is bounded: the run stops after ``--duration`` seconds or ``--max-requests``
HTTP requests, whichever comes first (or at SIGINT/SIGTERM, still printing its counts), and
the URL must be a loopback address: this is a tool for your own test server, not for anyone
else's.

The server must trust the simulator as a proxy (``--trusted-proxy 127.0.0.1`` on the demo),
otherwise every request lands in the single scope ``ip:127.0.0.1``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import ipaddress
import itertools
import json
import math
import random
import signal
import sys
import time
import urllib.parse
from collections.abc import Callable
from typing import Any, TextIO

from ._extras import requires

with requires("mcp", "mcp-cancellation simulate"):
    import httpx

__all__ = [
    "PROTOCOL_VERSION",
    "SimulationConfig",
    "SimulationStats",
    "add_parser",
    "run",
    "simulate",
]

#: The protocol version the simulator speaks: the newest one that still has client-to-server
#: ``notifications/cancelled`` on HTTP (2026-07-28 cancels by closing the stream instead).
PROTOCOL_VERSION = "2025-11-25"
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
_DEFAULT_HOG_CALLS = 24
_MAX_HOG_CALLS = 400

_HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": PROTOCOL_VERSION,
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class SimulationConfig:
    """What to run, for how long. Defaults give a few hundred requests per second."""

    url: str
    duration: float = 30.0
    max_requests: int = 200_000
    clients: int = 4
    call_seconds: int = 3
    cancel_share: float = 0.8
    flood_rate: float = 100.0
    flood_addresses: int = 500
    flood_max_id: int = 1000
    flood_invalid_share: float = 0.02
    hogs: int = 2
    #: calls each hog keeps in flight; 0: the server's quota and a half, read from /metrics
    hog_calls: int = 0
    hog_tool: str = "stubborn_sleep"
    hog_call_seconds: float = 20.0
    hog_interval: float = 0.5
    seed: int | None = None

    def __post_init__(self) -> None:
        _require_loopback(self.url)
        if not 0 < self.duration <= 3600:
            raise ValueError("duration must be in (0, 3600] seconds")
        if self.max_requests < 1:
            raise ValueError("max_requests must be at least 1")
        for name in ("clients", "flood_addresses", "hogs", "hog_calls", "flood_max_id"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")
        if not 0 <= self.cancel_share <= 1 or not 0 <= self.flood_invalid_share <= 1:
            raise ValueError("shares must be between 0 and 1")
        if self.flood_rate < 0 or self.call_seconds <= 0 or self.hog_call_seconds <= 0:
            raise ValueError("rates and call durations must be positive")
        if self.hog_interval <= 0:
            raise ValueError("hog_interval must be positive")


@dataclasses.dataclass
class SimulationStats:
    """What happened, counted by the simulator (the server's metrics count the same)."""

    requests: int = 0
    calls_started: int = 0
    calls_completed: int = 0
    calls_cancelled: int = 0
    calls_failed: int = 0
    cancels_sent: int = 0
    cancels_accepted: int = 0
    quota_rejected: int = 0
    invalid_rejected: int = 0
    flood_sent: int = 0
    flood_ignored: int = 0
    hog_calls: int = 0
    transport_errors: int = 0
    http_errors: int = 0
    elapsed: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)


def _require_loopback(url: str) -> None:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    host = parts.hostname
    if host == "localhost":
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ValueError(
            f"refusing to send simulated attack traffic to a non-loopback host: {host}"
        )


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


class _Simulation:
    def __init__(
        self, config: SimulationConfig, hog_calls: int, stop: asyncio.Event | None = None
    ) -> None:
        self.config = config
        self.hog_calls = hog_calls
        self.stats = SimulationStats(hog_calls=hog_calls)
        self.budget = _Budget(config, self.stats, stop)
        self.random = random.Random(config.seed)
        self.url = config.url

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
        timeout = httpx.Timeout(
            max(self.config.call_seconds, self.config.hog_call_seconds) + 15, connect=5
        )

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


async def simulate(
    config: SimulationConfig,
    *,
    on_progress: Callable[[SimulationStats, float], None] | None = None,
    stop: asyncio.Event | None = None,
) -> SimulationStats:
    """Run the simulation described by *config* and return what it counted.

    Setting *stop* ends the run early, as cleanly as reaching its time limit does.
    """
    hog_calls = config.hog_calls
    if hog_calls == 0 and config.hogs:
        quota = await server_quota(config.url)
        hog_calls = (
            _DEFAULT_HOG_CALLS if quota is None else min(_MAX_HOG_CALLS, quota + quota // 2 + 2)
        )
    simulation = _Simulation(config, hog_calls, stop)
    await simulation.run(on_progress)
    return simulation.stats


async def _main(
    config: SimulationConfig, on_progress: Callable[[SimulationStats, float], None]
) -> SimulationStats:
    """:func:`simulate`, stopped early and cleanly (counts printed) by SIGINT or SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    handled = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signum, stop.set)
            handled.append(signum)
    try:
        return await simulate(config, on_progress=on_progress, stop=stop)
    finally:
        for signum in handled:
            loop.remove_signal_handler(signum)


async def server_quota(url: str) -> int | None:
    """The server's ``max_rows_per_scope``, read from ``/metrics`` next to *url*, if any."""
    metrics = urllib.parse.urljoin(url, "/metrics")
    try:
        async with httpx.AsyncClient(timeout=5, trust_env=False) as client:
            response = await client.get(metrics)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    for line in response.text.splitlines():
        name, _, value = line.partition(" ")
        if name == "mcp_cancellation_max_rows_per_scope":
            try:
                quota = float(value)
            except ValueError:
                return None
            return int(quota) if math.isfinite(quota) and quota >= 1 else None
    return None


class _ProgressBar:
    """A one-line progress bar on a terminal (redrawn in place), silent elsewhere."""

    def __init__(self, stream: TextIO, width: int = 30) -> None:
        self.stream = stream
        self.width = width
        self.enabled = stream.isatty()

    def __call__(self, stats: SimulationStats, fraction: float) -> None:
        if not self.enabled:
            return
        filled = int(self.width * fraction)
        bar = "#" * filled + "-" * (self.width - filled)
        line = (
            f"\r[{bar}] {stats.elapsed:5.1f}s  calls {stats.calls_started}"
            f"  cancelled {stats.calls_cancelled}  flood {stats.flood_sent}"
            f"  quota-rejected {stats.quota_rejected}"
        )
        self.stream.write(line)
        if fraction >= 1.0:
            self.stream.write("\n")
        self.stream.flush()


def add_parser(subparsers: Any) -> None:
    """Register ``simulate`` on the ``mcp-cancellation`` command."""
    defaults = SimulationConfig(url="http://127.0.0.1:8000/mcp")
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "simulate",
        help="send well-behaved and abusive cancellation traffic to a local server",
        description=(
            "Drive a local MCP server behind CancellationMiddleware (e.g. `mcp-cancellation "
            "demo --trusted-proxy 127.0.0.1`) with well-behaved clients, a flood of "
            "notifications/cancelled from many addresses (X-Forwarded-For) and scopes that "
            "hog their quota. Loopback URLs only; bounded in time and requests."
        ),
    )
    arg = parser.add_argument
    arg("--url", required=True, help="the MCP endpoint, e.g. http://127.0.0.1:8000/mcp")
    arg("--duration", type=float, default=defaults.duration, help="seconds (default %(default)s)")
    arg("--max-requests", type=int, default=defaults.max_requests, help="HTTP request budget")
    arg("--clients", type=int, default=defaults.clients, help="well-behaved clients")
    arg("--call-seconds", type=int, default=defaults.call_seconds, help="slow_count length")
    arg("--flood-rate", type=float, default=defaults.flood_rate, help="flood notifications/s")
    arg("--flood-addresses", type=int, default=defaults.flood_addresses, help="flood sources")
    arg("--hogs", type=int, default=defaults.hogs, help="scopes that sit at their quota")
    arg(
        "--hog-calls",
        type=int,
        default=defaults.hog_calls,
        help="calls each hog keeps in flight (default: 1.5 x the server's quota, from /metrics)",
    )
    arg("--hog-tool", default=defaults.hog_tool, help="a tool that ignores cancellation polls")
    arg("--hog-call-seconds", type=float, default=defaults.hog_call_seconds, help="its length")
    arg("--seed", type=int, default=None, help="random seed, for repeatable runs")
    arg("--json", action="store_true", help="print the final counts as JSON on stdout")
    arg("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run the simulation from parsed arguments; 0 when the server answered throughout."""
    try:
        config = SimulationConfig(
            url=args.url,
            duration=args.duration,
            max_requests=args.max_requests,
            clients=args.clients,
            call_seconds=args.call_seconds,
            flood_rate=args.flood_rate,
            flood_addresses=args.flood_addresses,
            hogs=args.hogs,
            hog_calls=args.hog_calls,
            hog_tool=args.hog_tool,
            hog_call_seconds=args.hog_call_seconds,
            seed=args.seed,
        )
    except ValueError as exc:
        print(f"mcp-cancellation simulate: {exc}", file=sys.stderr)
        return 2
    bar = _ProgressBar(sys.stderr)
    if args.no_progress:
        bar.enabled = False
    stats = asyncio.run(_main(config, bar))
    if args.json:
        print(json.dumps(stats.as_dict(), sort_keys=True))
    else:
        width = max(len(name) for name in stats.as_dict())
        for name, value in stats.as_dict().items():
            shown = f"{value:.1f}" if isinstance(value, float) else str(value)
            print(f"{name.replace('_', ' '):<{width}}  {shown}")
    if stats.calls_started == 0 or stats.transport_errors > stats.requests // 10:
        print("mcp-cancellation simulate: the server did not answer", file=sys.stderr)
        return 1
    return 0
