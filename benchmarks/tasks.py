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

Not measured: the same load against fastmcp-tasks (docs/performance.md says why).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
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


def start_worker(redis_url: str, prefix: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.tasks._app",
            "--port",
            str(port),
            "--redis-url",
            redis_url,
            "--prefix",
            prefix,
            "--quota",
            "100000",
            "--heartbeat-ttl",
            "30",
        ],
        cwd=Path(__file__).resolve().parent.parent,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
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
    client: httpx.AsyncClient, urls: list[str], samples: int
) -> tuple[list[float], list[float]]:
    """Create-to-running and cancel-to-stop, each task created on one worker and watched
    (and cancelled) through the other."""
    running: list[float] = []
    stopping: list[float] = []
    for n in range(samples):
        a, b = urls[n % 2], urls[(n + 1) % 2]
        where = f"198.18.0.{n % 250 + 1}"
        sent = time.perf_counter()
        created = await rpc(
            client,
            a,
            "tools/call",
            {"name": "slow_count", "arguments": {"n": 100_000, "step": 0.01}},
            where,
        )
        task_id = created["result"]["taskId"]

        async def started(task_id: str = task_id, where: str = where, b: str = b) -> bool:
            answer = await rpc(client, b, "tasks/get", {"taskId": task_id}, where)
            return "statusMessage" in answer["result"]

        running.append(await until(started) - sent)
        sent = time.perf_counter()
        await rpc(client, b, "tasks/cancel", {"taskId": task_id}, where)

        async def stopped(task_id: str = task_id, where: str = where, b: str = b) -> bool:
            answer = await rpc(client, b, "tasks/get", {"taskId": task_id}, where)
            return bool(answer["result"]["status"] == "cancelled")

        stopping.append(await until(stopped) - sent)
    return running, stopping


async def run(args: argparse.Namespace) -> None:
    with RedisServer() as server:
        prefix = f"bench-{uuid.uuid4().hex[:6]}"
        workers = [start_worker(server.url, prefix) for _ in range(2)]
        urls = [url for _, url in workers]
        pids = [process.pid for process, _ in workers]
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
        try:
            async with httpx.AsyncClient(limits=limits, timeout=30) as client:
                # Memory per stored task (a 1 kB result), then the polled population.
                before = redis_memory(server.port)
                sized = await create_tasks(client, urls, args.tasks, "sized", {"size": 1000})
                await asyncio.sleep(1.0)  # every one has ended (and written its result)
                per_task = (redis_memory(server.port) - before) / len(sized)
                result_bytes = len(
                    '{"content":[{"type":"text","text":"' + "x" * 1000 + '"}],'
                    '"structuredContent":{"result":"' + "x" * 1000 + '"},"isError":false}'
                )
                polled = sized
                cpu: dict[str, list[float]] = {"tasks/get": [], "tools/list": []}
                redis_per_get: list[float] = []
                for round_ in range(args.rounds):
                    order = ("tasks/get", "tools/list")
                    for method in order if round_ % 2 == 0 else tuple(reversed(order)):
                        cpu_before = sum(cpu_seconds(pid) or 0.0 for pid in pids)
                        redis_before = redis_cpu(server.port)
                        count = await load(
                            client, urls, method, polled, args.concurrency, args.duration
                        )
                        cpu_after = sum(cpu_seconds(pid) or 0.0 for pid in pids)
                        cpu[method].append((cpu_after - cpu_before) / count)
                        if method == "tasks/get":
                            redis_per_get.append((redis_cpu(server.port) - redis_before) / count)
                running, stopping = await latencies(client, urls, args.samples)
        finally:
            for process, _ in workers:
                process.terminate()
                process.wait(timeout=10)

    get_cpu = statistics.median(cpu["tasks/get"])
    list_cpu = statistics.median(cpu["tools/list"])
    redis_get = statistics.median(redis_per_get)
    beyond = per_task - result_bytes
    running.sort()
    stopping.sort()
    print(f"\n{args.tasks} tasks on two workers, {args.concurrency} clients, Redis")
    print(f"  server CPU per tasks/get        {get_cpu * 1e6:8.0f} us")
    print(f"  server CPU per tools/list       {list_cpu * 1e6:8.0f} us")
    print(f"  Redis CPU per tasks/get         {redis_get * 1e6:8.1f} us")
    print(f"  Redis memory per stored task    {per_task:8.0f} B ({result_bytes} B of result)")
    print(
        f"  create-to-running p50 / p90     {statistics.median(running) * 1e3:8.1f} / "
        f"{running[int(len(running) * 0.9)] * 1e3:.1f} ms (through the other worker)"
    )
    print(
        f"  cancel-to-stop p50 / p90        {statistics.median(stopping) * 1e3:8.1f} / "
        f"{stopping[int(len(stopping) * 0.9)] * 1e3:.1f} ms (across workers)"
    )
    ratio = get_cpu / list_cpu
    check("a poll <= 1.2x the server CPU of a tools/list", ratio <= 1.2, f"{ratio:.2f}x")
    check(
        "<= 4 kB of Redis memory per stored task beyond its result",
        beyond <= 4096,
        f"{beyond:.0f} B",
    )
    p50 = statistics.median(stopping)
    check("cancel-to-stop of a polling task p50 <= 50 ms", p50 <= 0.05, f"{p50 * 1e3:.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--duration", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--samples", type=int, default=40)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
