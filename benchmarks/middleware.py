"""Overhead of CancellationMiddleware on a real server: bare SDK app vs wrapped, same run.

Two uvicorn servers run in their own processes on 127.0.0.1: the demo's ``MCPServer``
(stateless Streamable HTTP) as is, and the same app behind ``CancellationMiddleware``.
Concurrent httpx clients in this process drive each in turn, alternating rounds, with

* ``tools/call echo`` (a tool that returns at once): the middleware parses, tracks and
  clears every call;
* ``notifications/cancelled`` for an id that is not in flight: the SDK acknowledges it
  with a whole per-request transport, the middleware answers it itself.

Printed: requests per second and p50/p99 latency per case, best of the rounds, and the
ratios against the targets (throughput >= 0.97x the bare app, p99 <= 1.1x).

The httpx clients share the two cores with the servers and bound the load (about 500
requests per second): the servers idle part of the time. The tool call is then also
driven *server-bound*, by a minimal HTTP/1.1 client on raw asyncio streams (prebuilt
requests, keep-alive, no parsing beyond the framing), which keeps each server's CPU busy:
there throughput is the server's capacity, the figure a heavier load generator would see.

The servers run on plain uvicorn's stack (asyncio and h11, what the ``[mcp]`` extra
installs) unless ``--stack uvloop-httptools`` (``uvicorn[standard]``'s) says otherwise:
httptools parses HTTP far faster than h11, so the same middleware is a larger share of a
request there.

    python benchmarks/middleware.py [--duration 2] [--rounds 8] [--concurrency 16]
                                    [--mode json|sse|both]   (default both)
                                    [--stack asyncio-h11|uvloop-httptools]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import logging
import os
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from _common import check

HEADERS = {
    "content-type": "application/json",
    "accept": "application/json, text/event-stream",
    "mcp-protocol-version": "2025-11-25",
}


# -- the servers (run in subprocesses) -------------------------------------------------------


#: uvicorn's ``loop`` and ``http`` for each server stack.
STACKS = {"asyncio-h11": ("asyncio", "h11"), "uvloop-httptools": ("uvloop", "httptools")}


def serve(kind: str, port: int, json_response: bool, stack: str = "asyncio-h11") -> None:
    """Run one server until killed: ``bare``, ``wrapped`` (the memory storage) or
    ``redis`` (wrapped, on the Redis of ``MCP_CANCELLATION_REDIS_URL``), on *stack*."""
    # benchmarks/redis.py would shadow the redis package: this directory goes first.
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    import uvicorn

    from mcp_cancellation import CancellationMiddleware, CancellationRegistry
    from mcp_cancellation._demo import build_demo_server

    logging.basicConfig(level=logging.WARNING)
    # (redis_cost.py's cancel-to-stop polls every 10 ms, so that the poll is not the
    # figure.)
    poll = float(os.environ.get("MCP_CANCELLATION_BENCH_POLL", "0.1"))
    app: Any = build_demo_server(poll_interval=poll).streamable_http_app(
        stateless_http=True, json_response=json_response
    )
    if kind in ("wrapped", "redis"):
        # (The registry's storage comes from MCP_CANCELLATION_REDIS_URL when it is set.)
        app = CancellationMiddleware(app, registry=CancellationRegistry())
    loop, http = STACKS[stack]
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="on",
        loop=loop,
        http=http,
    )


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_server(
    kind: str, json_response: bool, stack: str = "asyncio-h11", redis_url: str = ""
) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    args = [sys.executable, __file__, "--serve", kind, "--port", str(port), "--stack", stack]
    if not json_response:
        args.append("--sse")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent / "src")}
    env.pop("MCP_CANCELLATION_REDIS_URL", None)
    if kind == "redis":
        env["MCP_CANCELLATION_REDIS_URL"] = redis_url
    process = subprocess.Popen(args, env=env)
    url = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.post(url, json=tool_call(), headers=HEADERS, timeout=5)
            return process, url
        except httpx.TransportError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"{kind} server did not start")


# -- the load --------------------------------------------------------------------------------


@dataclass
class Result:
    rps: float
    p50: float
    p99: float
    cpu: float | None = None  # server CPU seconds per request (user + system)


def cpu_seconds(pid: int) -> float | None:
    """CPU time used so far by process *pid* and the processes it started that still
    run (a Redis storage's heartbeat beater: the server pays for it too), from Linux's
    ``/proc``, or ``None``."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    total = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    for child in _children(pid):
        total += cpu_seconds(child) or 0.0
    return total


def _children(pid: int) -> list[int]:
    """The processes *pid* started that still run (``/proc/<pid>/task/*/children``)."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as children:
                found += [int(child) for child in children.read().split()]
        except OSError:
            continue
    return found


_ids = itertools.count(1)


def tool_call() -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": next(_ids),
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "hello"}},
    }


def cancel_notification() -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": next(_ids), "reason": "benchmark"},
    }


#: Opens one client connection for a worker: yields the call that sends one request and
#: waits for its whole response.
Connect = Callable[[], contextlib.AbstractAsyncContextManager[Callable[[], Awaitable[None]]]]


async def measure(connect: Connect, concurrency: int, duration: float, pid: int) -> Result:
    """*concurrency* workers, each on its own connection, send requests back to back: a
    warm-up, then *duration* timed seconds; latencies, throughput and the server's CPU."""
    latencies: list[float] = []

    async def worker(stop: float, record: bool) -> None:
        async with connect() as call:
            while time.perf_counter() < stop:
                started = time.perf_counter()
                await call()
                if record:
                    latencies.append(time.perf_counter() - started)

    warmup = time.perf_counter() + min(1.0, duration / 4)
    await asyncio.gather(*(worker(warmup, False) for _ in range(concurrency)))
    cpu_before = cpu_seconds(pid)
    began = time.perf_counter()
    await asyncio.gather(*(worker(began + duration, True) for _ in range(concurrency)))
    elapsed = time.perf_counter() - began
    cpu_after = cpu_seconds(pid)
    latencies.sort()
    cpu = None
    if cpu_before is not None and cpu_after is not None:
        cpu = (cpu_after - cpu_before) / len(latencies)
    return Result(
        rps=len(latencies) / elapsed,
        p50=statistics.median(latencies),
        p99=latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        cpu=cpu,
    )


async def drive(
    url: str, body: Callable[[], dict[str, Any]], concurrency: int, duration: float, pid: int
) -> Result:
    """*concurrency* httpx workers post *body* back to back for *duration* seconds."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:

        async def call() -> None:
            response = await client.post(url, json=body(), headers=HEADERS)
            if response.status_code >= 400:
                raise RuntimeError(f"HTTP {response.status_code}: {response.text[:200]}")

        @contextlib.asynccontextmanager
        async def connect() -> AsyncIterator[Callable[[], Awaitable[None]]]:
            yield call  # the client's pool holds the connections

        return await measure(connect, concurrency, duration, pid)


async def drive_raw(
    url: str, body: Callable[[], dict[str, Any]], concurrency: int, duration: float, pid: int
) -> Result:
    """Like :func:`drive`, with a minimal keep-alive HTTP/1.1 client on asyncio streams:
    cheap enough per request that the server, not this process, is the bottleneck."""
    host_port = url.split("/")[2]
    host, port = host_port.split(":")
    path = "/" + url.split("/", 3)[3]
    head = "".join(f"{name}: {value}\r\n" for name, value in HEADERS.items())

    def request() -> bytes:
        payload = json.dumps(body(), separators=(",", ":")).encode()
        return (
            f"POST {path} HTTP/1.1\r\nhost: {host_port}\r\n{head}"
            f"content-length: {len(payload)}\r\n\r\n"
        ).encode() + payload

    @contextlib.asynccontextmanager
    async def connect() -> AsyncIterator[Callable[[], Awaitable[None]]]:
        reader, writer = await asyncio.open_connection(host, int(port))

        async def call() -> None:
            """Send one request, read its response (``content-length`` or chunked)."""
            writer.write(request())
            header = (await reader.readuntil(b"\r\n\r\n")).lower()
            at = header.find(b"content-length:")
            if at >= 0:
                await reader.readexactly(int(header[at + 15 : header.index(b"\r\n", at)]))
            elif b"chunked" in header:
                while size := int((await reader.readuntil(b"\r\n")).strip(), 16):
                    await reader.readexactly(size + 2)
                await reader.readexactly(2)
            if int(header[9:12]) >= 400:
                raise RuntimeError(f"HTTP {header[9:12].decode()}")

        try:
            yield call
        finally:
            writer.close()

    return await measure(connect, concurrency, duration, pid)


#: A load generator: ``(url, body, concurrency, seconds, server pid) -> Result``.
Driver = Callable[[str, Callable[[], dict[str, Any]], int, float, int], Awaitable[Result]]


def best(results: list[Result]) -> Result:
    """Best of the rounds: highest throughput, lowest latencies (noise only adds)."""
    cpus = [r.cpu for r in results if r.cpu is not None]
    return Result(
        rps=max(r.rps for r in results),
        p50=min(r.p50 for r in results),
        p99=min(r.p99 for r in results),
        cpu=statistics.median(cpus) if cpus else None,
    )


async def _stub_app(scope: Any, receive: Any, send: Any) -> None:
    """The cheapest possible inner app: read the body, answer 200."""
    await receive()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"{}", "more_body": False})


async def in_process_overhead(count: int = 20_000) -> dict[str, float]:
    """Seconds per request the middleware adds in front of a stub app, no network: the
    figure least moved by other load (best of 3)."""
    from mcp_cancellation import CancellationMiddleware, CancellationRegistry

    wrapped = CancellationMiddleware(
        _stub_app, registry=CancellationRegistry(janitor_interval=None)
    )
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/mcp",
        "headers": [(b"content-type", b"application/json")],
        "client": ("127.0.0.1", 40000),
    }

    async def send(message: Any) -> None:
        return None

    async def per_request(app: Any, make: Callable[[], dict[str, Any]]) -> float:
        bodies = [json.dumps(make()).encode() for _ in range(count)]
        began = time.perf_counter()
        for body in bodies:
            pending = [{"type": "http.request", "body": body, "more_body": False}]

            async def receive(pending: list[dict[str, Any]] = pending) -> Any:
                return pending.pop() if pending else {"type": "http.disconnect"}

            await app(dict(scope), receive, send)
        return (time.perf_counter() - began) / count

    figures = {}
    for name, make in (("tools/call", tool_call), ("notifications/cancelled", cancel_notification)):
        bare = min([await per_request(_stub_app, make) for _ in range(3)])
        with_middleware = min([await per_request(wrapped, make) for _ in range(3)])
        figures[name] = with_middleware - bare
    return figures


async def call_in_process(app: Any) -> None:
    """One ``tools/call echo`` POST to *app* in process, as uvicorn would hand it over (a
    fresh id each time); checks that it was answered 200."""
    body = json.dumps(tool_call()).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "root_path": "",
        "query_string": b"",
        "headers": list(_IN_PROCESS_HEADERS),
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }
    pending = [{"type": "http.request", "body": body, "more_body": False}]
    ended = asyncio.Event()
    status: list[int] = []

    async def receive() -> Any:
        if pending:
            return pending.pop()
        await ended.wait()
        return {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])
        elif not message.get("more_body", False):
            ended.set()

    await app(scope, receive, send)
    assert status == [200], status


_IN_PROCESS_HEADERS = [
    (b"host", b"127.0.0.1:8000"),
    *((k.encode(), v.encode()) for k, v in HEADERS.items()),
]


@contextlib.asynccontextmanager
async def demo_apps(json_response: bool) -> AsyncIterator[dict[str, Any]]:
    """The demo's ``MCPServer`` app, ``bare`` and ``wrapped`` in the middleware, each a
    separate app with its lifespan running."""
    from mcp_cancellation import CancellationMiddleware, CancellationRegistry
    from mcp_cancellation._demo import build_demo_server

    apps: dict[str, tuple[Any, Any]] = {}
    for kind in ("bare", "wrapped"):
        inner = build_demo_server().streamable_http_app(
            stateless_http=True, json_response=json_response
        )
        outer = (
            CancellationMiddleware(inner, registry=CancellationRegistry(janitor_interval=None))
            if kind == "wrapped"
            else inner
        )
        apps[kind] = (inner, outer)
    async with contextlib.AsyncExitStack() as stack:
        for inner, _ in apps.values():
            await stack.enter_async_context(inner.router.lifespan_context(inner))
        yield {kind: outer for kind, (_, outer) in apps.items()}


async def in_process_real_sdk(json_response: bool, count: int = 1_500) -> tuple[float, float]:
    """CPU seconds per ``tools/call`` of the demo's ``MCPServer`` app called in process (no
    network, no clients): bare, and behind the middleware, in 6 alternating rounds (the
    medians). Unlike the stub figure above, the middleware's work here runs between the
    SDK's, with the caches as a server leaves them."""
    cpu: dict[str, list[float]] = {"bare": [], "wrapped": []}
    async with demo_apps(json_response) as apps:
        for app in apps.values():
            for _ in range(50):  # warm up
                await call_in_process(app)
        for _ in range(6):
            for kind, app in apps.items():
                started = time.process_time()
                for _ in range(count):
                    await call_in_process(app)
                cpu[kind].append((time.process_time() - started) / count)
    return statistics.median(cpu["bare"]), statistics.median(cpu["wrapped"])


async def run(args: argparse.Namespace) -> None:
    """Each response mode asked for, JSON first: its own pair of servers and cases."""
    modes = {"json": [True], "sse": [False], "both": [True, False]}[args.mode]
    for i, json_response in enumerate(modes):
        if i:
            print()
        await run_mode(args, json_response)


async def run_mode(args: argparse.Namespace, json_response: bool) -> None:
    servers = {kind: start_server(kind, json_response, args.stack) for kind in ("bare", "wrapped")}
    try:
        cases: list[tuple[str, Callable[[], dict[str, Any]], Driver]] = [
            ("tools/call echo", tool_call, drive),
            ("notifications/cancelled", cancel_notification, drive),
            ("tools/call echo, server-bound (raw HTTP/1.1 client)", tool_call, drive_raw),
        ]
        overhead = await in_process_overhead()
        print("in-process overhead of the middleware (stub app, no network, best of 3):")
        for name, seconds in overhead.items():
            print(f"    {name:<24} {seconds * 1e6:7.1f} us per request")
        bare_cpu, wrapped_cpu = await in_process_real_sdk(json_response)
        real = bare_cpu / wrapped_cpu
        mode = "JSON" if json_response else "SSE"
        print(
            "in process with the demo's MCPServer (no network, CPU time, medians of 6 rounds):\n"
            f"    tools/call: bare {bare_cpu * 1e6:.0f} us, with middleware "
            f"{wrapped_cpu * 1e6:.0f} us (+{(wrapped_cpu - bare_cpu) * 1e6:.0f} us): capacity "
            f"ratio {real:.3f}x"
        )
        check(f"{mode}, in process: capacity >= 0.97x the bare SDK's", real >= 0.97, f"{real:.3f}x")
        print(
            f"middleware overhead: stateless MCPServer, {mode} responses, uvicorn "
            f"{args.stack}, {args.concurrency} concurrent clients, {args.rounds} x "
            f"{args.duration:g} s per case"
        )
        for name, body, driver in cases:
            results: dict[str, list[Result]] = {"bare": [], "wrapped": []}
            for round_ in range(args.rounds):
                # Alternate which goes first, so neither always follows the other.
                order = ("bare", "wrapped") if round_ % 2 == 0 else ("wrapped", "bare")
                for kind in order:
                    process, url = servers[kind]
                    results[kind].append(
                        await driver(url, body, args.concurrency, args.duration, process.pid)
                    )
            bare, wrapped = best(results["bare"]), best(results["wrapped"])
            print(f"\n  {name}  (best of {args.rounds} rounds)")
            for kind, result in (("bare SDK", bare), ("with middleware", wrapped)):
                cpu = f"   server CPU {result.cpu * 1e3:6.3f} ms/req" if result.cpu else ""
                print(
                    f"    {kind:<16} {result.rps:9.1f} req/s   p50 {result.p50 * 1e3:7.2f} ms"
                    f"   p99 {result.p99 * 1e3:7.2f} ms{cpu}"
                )
            # Rounds run in bare/wrapped pairs, back to back: the median of the pairs'
            # ratios is the figure least moved by other load on the machine.
            pairs = list(zip(results["bare"], results["wrapped"], strict=True))
            throughput = statistics.median(w.rps / b.rps for b, w in pairs)
            p99 = statistics.median(w.p99 / b.p99 for b, w in pairs)
            print(
                f"    best-of ratios: throughput {wrapped.rps / bare.rps:.3f}x, "
                f"p99 {wrapped.p99 / bare.p99:.3f}x"
            )
            print(f"    median paired ratios: throughput {throughput:.3f}x, p99 {p99:.3f}x")
            check(
                f"{mode}, {name}: throughput >= 0.97x the bare SDK's",
                throughput >= 0.97,
                f"{throughput:.3f}x",
            )
            check(f"{mode}, {name}: p99 <= 1.1x the bare SDK's", p99 <= 1.1, f"{p99:.3f}x")
            if bare.cpu and name.startswith("tools/call"):
                # (A cancellation is answered by the middleware instead of the SDK, so
                # only the tool call adds the middleware's work to the SDK's.)
                added = overhead["tools/call"]
                implied = bare.cpu / (bare.cpu + added) if added > 0 else 1.0
                print(
                    f"    implied by the stub's in-process overhead (a hot loop: a lower "
                    f"bound): capacity ratio {implied:.3f}x "
                    f"({added * 1e6:.0f} us on {bare.cpu * 1e3:.2f} ms of server CPU)"
                )
            if bare.cpu and wrapped.cpu:
                # At saturation throughput is 1 / CPU per request: this ratio is the
                # figure least disturbed by other load on a shared machine.
                capacity = bare.cpu / wrapped.cpu
                print(f"    server CPU per request: capacity ratio {capacity:.3f}x")
                check(
                    f"{mode}, {name}: server CPU capacity >= 0.97x the bare SDK's",
                    capacity >= 0.97,
                    f"{capacity:.3f}x",
                )
    finally:
        for process, _ in servers.values():
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--duration", type=float, default=2.0, help="seconds per round")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument(
        "--mode",
        choices=["json", "sse", "both"],
        default="both",
        help="response mode of the servers (default both, JSON first)",
    )
    parser.add_argument("--sse", action="store_true", help="the same as --mode sse")
    parser.add_argument(
        "--stack",
        choices=list(STACKS),
        default="asyncio-h11",
        help="the servers' uvicorn stack (default asyncio-h11, plain uvicorn's)",
    )
    parser.add_argument("--serve", choices=["bare", "wrapped", "redis"], help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sse:
        args.mode = "sse"
    if args.serve:
        serve(args.serve, args.port, not args.sse, args.stack)
        return
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
