"""What tasks (SEP-2663, ``TasksExtension``) cost a user, end to end, on Redis.

Two uvicorn worker processes serve ``tests/tasks/_app.py`` (an ``MCPServer`` with
``TasksExtension`` behind ``CancellationMiddleware``) on one real redis-server this script
starts. It creates ``--tasks`` tasks (1 000) across many scopes, then 16 httpx clients
poll them with ``tasks/get``, alternating workers, and, in alternate rounds, call
``tools/list`` the same way; every figure is the median over the rounds.

Printed with their goals (issue 66):

* server CPU per ``tasks/get`` <= 1.2x a ``tools/list``'s (both workers' CPU from
  ``/proc``), and Redis CPU per ``tasks/get`` (``INFO cpu``);
* Redis memory per stored task, beyond its result (a 1 kB result) <= 4 kB;
* create-to-running: from the ``tools/call`` sent to one worker to its first progress
  visible through the other;
* cancel-to-stop of a polling task across workers, p50 <= 50 ms: from ``tasks/cancel``
  sent to the other worker to ``tasks/get`` reading ``cancelled`` there.

    python benchmarks/tasks.py [--tasks 1000] [--duration 2] [--rounds 4]
                               [--concurrency 16] [--samples 40]

The same load runs, in the same run, against FastMCP servers with this package's
``FastMCPTasksExtension`` (``tests/tasks/_fastmcp_app.py``, issue 75), and against
fastmcp-tasks on the same Redis (two FastMCP
server processes with ``fastmcp-tasks``' Docket workers, ``benchmarks/_fastmcp_tasks_server.py``,
in the FastMCP tasks client's virtualenv of ``tests/tasks``), printed side by side. Goals
against it: cancel-to-stop at least twice as fast, no more server CPU per poll. The stop
is seen from outside: the tool sets a Redis key as it ends (``marker``), which this script
watches.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
from _common import check
from middleware import cpu_seconds

# benchmarks/redis.py would shadow the redis package from here on.
sys.path.remove(str(Path(__file__).resolve().parent))

from redis.asyncio import Redis as AsyncRedis
from redis.client import Redis as SyncRedis
from tests.support import RedisServer, free_port, wait_until

EXTENSION = "io.modelcontextprotocol/tasks"
MODERN = "2026-07-28"
HEADERS = {
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
    "mcp-protocol-version": MODERN,
}
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {"extensions": {EXTENSION: {}}},
}
_ids = itertools.count(1)


def body(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": next(_ids),
        "method": method,
        "params": {**params, "_meta": META},
    }


async def rpc(
    client: httpx.AsyncClient, url: str, method: str, params: dict[str, Any], address: str
) -> dict[str, Any]:
    headers = {**HEADERS, "mcp-method": method, "x-forwarded-for": address}
    if method == "tools/call":
        headers["mcp-name"] = params["name"]
    response = await client.post(f"{url}/mcp", json=body(method, params), headers=headers)
    if response.status_code >= 400:
        raise RuntimeError(f"HTTP {response.status_code}: {response.text[:200]}")
    message: dict[str, Any] = response.json()
    return message


ROOT = Path(__file__).resolve().parent.parent


def start_worker(
    redis_url: str, prefix: str, module: str = "tests.tasks._app"
) -> tuple[subprocess.Popen[bytes], str]:
    """A worker of this package: the SDK's server (``tests/tasks/_app.py``), or FastMCP's
    with ``FastMCPTasksExtension`` (``tests/tasks/_fastmcp_app.py``)."""
    port = free_port()
    command = [sys.executable, "-m", module, "--port", str(port)]
    command += ["--redis-url", redis_url, "--prefix", prefix]
    command += ["--quota", "100000", "--heartbeat-ttl", "30"]
    return _started(command, port, redis_url)


def start_peer(python: Path, redis_url: str, name: str) -> tuple[subprocess.Popen[bytes], str]:
    """A worker of fastmcp-tasks (``_fastmcp_tasks_server.py``, in its own venv)."""
    port = free_port()
    script = str(ROOT / "benchmarks" / "_fastmcp_tasks_server.py")
    command = [str(python), script, "--port", str(port), "--redis-url", redis_url]
    return _started([*command, "--name", name], port, redis_url)


def _started(command: list[str], port: int, redis_url: str) -> tuple[subprocess.Popen[bytes], str]:
    env = {**os.environ, "MCP_BENCH_MARKER_URL": redis_url}
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(url, timeout=1).status_code > 0
        except httpx.TransportError:
            return False

    wait_until(lambda: process.poll() is not None or up(), timeout=30, interval=0.1)
    if process.poll() is not None:
        raise RuntimeError("the worker exited at start")
    return process, url


def redis_cpu(port: int) -> float:
    with SyncRedis(port=port, decode_responses=True) as client:
        cpu = client.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def redis_memory(port: int) -> int:
    with SyncRedis(port=port, decode_responses=True) as client:
        return int(client.info("memory")["used_memory"])


def address(i: int) -> str:
    return f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}"


async def create_tasks(
    client: httpx.AsyncClient, urls: list[str], count: int, tool: str, arguments: dict[str, Any]
) -> list[tuple[str, str]]:
    """*count* tasks across as many scopes, created 16 at a time; (address, task id)."""
    made: list[tuple[str, str]] = []

    async def one(i: int) -> None:
        where = address(i + 1)
        answer = await rpc(
            client, urls[i % 2], "tools/call", {"name": tool, "arguments": arguments}, where
        )
        made.append((where, answer["result"]["taskId"]))

    for start in range(0, count, 16):
        await asyncio.gather(*(one(i) for i in range(start, min(count, start + 16))))
    return made


async def load(
    client: httpx.AsyncClient,
    urls: list[str],
    method: str,
    tasks: list[tuple[str, str]],
    concurrency: int,
    duration: float,
) -> int:
    """*concurrency* clients send *method* back to back for *duration*; the count."""
    done = 0
    stop = time.perf_counter() + duration

    async def worker(n: int) -> None:
        nonlocal done
        rng = random.Random(n)
        turn = n
        while time.perf_counter() < stop:
            where, task_id = rng.choice(tasks)
            params = {"taskId": task_id} if method == "tasks/get" else {}
            await rpc(client, urls[turn % 2], method, params, where)
            turn += 1
            done += 1

    await asyncio.gather(*(worker(n) for n in range(concurrency)))
    return done


async def until(check_answer: Any, within: float = 10.0, interval: float = 0.005) -> float:
    """Poll until ``await check_answer()`` is true; the time it became so."""
    deadline = time.perf_counter() + within
    while time.perf_counter() < deadline:
        if await check_answer():
            return time.perf_counter()
        await asyncio.sleep(interval)
    raise TimeoutError("not reached in time")


async def latencies(
    client: httpx.AsyncClient, urls: list[str], samples: int, marks: AsyncRedis
) -> tuple[list[float], list[float]]:
    """Create-to-running and cancel-to-stop, each task created on one worker and watched
    (and cancelled) through the other; the stop is the tool's own marker in Redis."""
    running: list[float] = []
    stopping: list[float] = []
    for n in range(samples):
        a, b = urls[n % 2], urls[(n + 1) % 2]
        where = f"198.18.0.{n % 250 + 1}"
        marker = f"bench-stop-{uuid.uuid4().hex}"
        arguments = {"n": 100_000, "step": 0.01, "marker": marker}
        sent = time.perf_counter()
        created = await rpc(
            client, a, "tools/call", {"name": "slow_count", "arguments": arguments}, where
        )
        task_id = created["result"]["taskId"]

        async def started(task_id: str = task_id, where: str = where, b: str = b) -> bool:
            answer = await rpc(client, b, "tasks/get", {"taskId": task_id}, where)
            return "statusMessage" in answer["result"]

        running.append(await until(started) - sent)
        sent = time.perf_counter()
        await rpc(client, b, "tasks/cancel", {"taskId": task_id}, where)

        async def stopped(marker: str = marker) -> bool:
            return bool(await marks.exists(marker))

        stopping.append(await until(stopped, interval=0.001) - sent)
    return running, stopping


class Figures:
    """One implementation's figures, medians over the rounds."""

    def __init__(self) -> None:
        self.cpu: dict[str, list[float]] = {"tasks/get": [], "tools/list": []}
        self.redis_per_get: list[float] = []
        self.per_task = 0.0
        self.result_bytes = 0
        self.running: list[float] = []
        self.stopping: list[float] = []

    def median(self, method: str) -> float:
        return statistics.median(self.cpu[method])


async def measure(
    args: argparse.Namespace,
    server: RedisServer,
    workers: list[tuple[subprocess.Popen[bytes], str]],
) -> Figures:
    """The whole load against two workers of one implementation."""
    urls = [url for _, url in workers]
    pids = [process.pid for process, _ in workers]
    figures = Figures()
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:
        # Memory per stored task (a 1 kB result), then the polled population.
        before = redis_memory(server.port)
        tasks = await create_tasks(client, urls, args.tasks, "sized", {"size": 1000})
        await asyncio.sleep(1.0)  # every one has ended (and written its result)
        figures.per_task = (redis_memory(server.port) - before) / len(tasks)
        _, task_id = tasks[0]
        answer = await rpc(client, urls[0], "tasks/get", {"taskId": task_id}, tasks[0][0])
        figures.result_bytes = len(json.dumps(answer["result"].get("result", {})))
        for round_ in range(args.rounds):
            order = ("tasks/get", "tools/list")
            for method in order if round_ % 2 == 0 else tuple(reversed(order)):
                cpu_before = sum(cpu_seconds(pid) or 0.0 for pid in pids)
                redis_before = redis_cpu(server.port)
                count = await load(client, urls, method, tasks, args.concurrency, args.duration)
                cpu_after = sum(cpu_seconds(pid) or 0.0 for pid in pids)
                figures.cpu[method].append((cpu_after - cpu_before) / count)
                if method == "tasks/get":
                    redis_after = redis_cpu(server.port)
                    figures.redis_per_get.append((redis_after - redis_before) / count)
        async with AsyncRedis(port=server.port) as marks:
            figures.running, figures.stopping = await latencies(client, urls, args.samples, marks)
    figures.running.sort()
    figures.stopping.sort()
    return figures


def stop(workers: list[tuple[subprocess.Popen[bytes], str]]) -> None:
    for process, _ in workers:
        process.terminate()
        process.wait(timeout=10)


async def run(args: argparse.Namespace) -> None:
    peer: Figures | None = None
    with RedisServer() as server:
        prefix = f"bench-{uuid.uuid4().hex[:6]}"
        workers = [start_worker(server.url, prefix) for _ in range(2)]
        try:
            ours = await measure(args, server, workers)
        finally:
            stop(workers)
        prefix = f"bench-{uuid.uuid4().hex[:6]}"
        fast = [start_worker(server.url, prefix, "tests.tasks._fastmcp_app") for _ in range(2)]
        try:
            on_fastmcp = await measure(args, server, fast)
        finally:
            stop(fast)
        if not args.no_peer:
            try:
                from tests.tasks._workers import client_venv

                python = client_venv()
            except Exception as exc:  # no package index here: say so, measure the rest
                print(f"fastmcp-tasks not measured: {exc}")
            else:
                peers = [start_peer(python, server.url, prefix) for _ in range(2)]
                try:
                    peer = await measure(args, server, peers)
                finally:
                    stop(peers)

    def row(label: str, value: Any) -> None:
        theirs = "" if peer is None else value(peer)
        print(f"  {label:<34} {value(ours):>18} {value(on_fastmcp):>18} {theirs:>18}")

    def p(values: list[float], q: float) -> str:
        return f"{values[min(len(values) - 1, int(len(values) * q))] * 1e3:.1f} ms"

    print(f"\n{args.tasks} tasks on two workers, {args.concurrency} clients, one Redis")
    print(
        f"  {'':<34} {'ours (SDK)':>18} {'ours (FastMCP)':>18} "
        f"{'fastmcp-tasks' if peer else '':>18}"
    )
    row("server CPU per tasks/get", lambda f: f"{f.median('tasks/get') * 1e6:.0f} us")
    row("server CPU per tools/list", lambda f: f"{f.median('tools/list') * 1e6:.0f} us")
    row("Redis CPU per tasks/get", lambda f: f"{statistics.median(f.redis_per_get) * 1e6:.1f} us")
    row("Redis memory per stored task", lambda f: f"{f.per_task:.0f} B")
    row("  of which its result (JSON)", lambda f: f"{f.result_bytes} B")
    row("create-to-running p50", lambda f: p(f.running, 0.5))
    row("create-to-running p90", lambda f: p(f.running, 0.9))
    row("cancel-to-stop p50 (across workers)", lambda f: p(f.stopping, 0.5))
    row("cancel-to-stop p90", lambda f: p(f.stopping, 0.9))
    ratio = ours.median("tasks/get") / ours.median("tools/list")
    check("a poll <= 1.2x the server CPU of a tools/list", ratio <= 1.2, f"{ratio:.2f}x")
    beyond = ours.per_task - ours.result_bytes
    check(
        "<= 4 kB of Redis memory per stored task beyond its result",
        beyond <= 4096,
        f"{beyond:.0f} B",
    )
    stop_p50 = statistics.median(ours.stopping)
    check(
        "cancel-to-stop of a polling task p50 <= 50 ms",
        stop_p50 <= 0.05,
        f"{stop_p50 * 1e3:.1f} ms",
    )
    if peer is not None:
        faster = statistics.median(peer.stopping) / stop_p50
        check("cancel-to-stop at least 2x faster than fastmcp-tasks", faster >= 2, f"{faster:.1f}x")
        cpu = ours.median("tasks/get") / peer.median("tasks/get")
        check("no more server CPU per poll than fastmcp-tasks", cpu <= 1.0, f"{cpu:.2f}x")
        cpu = on_fastmcp.median("tasks/get") / peer.median("tasks/get")
        check(
            "FastMCP with this package: no more server CPU per poll than fastmcp-tasks",
            cpu <= 1.0,
            f"{cpu:.2f}x",
        )
        stop_fastmcp = statistics.median(on_fastmcp.stopping)
        faster = statistics.median(peer.stopping) / stop_fastmcp
        check(
            "FastMCP with this package: cancel-to-stop faster than fastmcp-tasks",
            faster >= 1,
            f"{faster:.1f}x",
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--duration", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--no-peer", action="store_true", help="skip fastmcp-tasks")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
