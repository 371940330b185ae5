"""What the Redis storage costs a user, end to end: the app server's CPU and the Redis
server's CPU per request, against the memory storage in the same run.

Three uvicorn servers run the demo's stateless ``MCPServer`` in their own processes: bare,
behind ``CancellationMiddleware`` with the memory storage, and behind it with
``RedisStorage`` on a real redis-server this script starts. Concurrent httpx clients (16
by default) call the ``echo`` tool on each in turn, alternating rounds; every figure is
the median over the rounds (server CPU from ``/proc``, Redis CPU from ``INFO cpu``).

Printed with their goals (issue 55):

* server CPU per request with Redis <= 1.10x the memory storage's (JSON and SSE);
* Redis CPU per request life <= 40 us (one Redis core then serves >= 25 000 request
  lives per second);
* p50 latency with Redis <= the memory storage's + 1 ms.

    python benchmarks/redis_cost.py [--duration 2] [--rounds 6] [--concurrency 16]
                                    [--mode json|sse|both]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import check
from middleware import Result, drive, start_server, tool_call

# benchmarks/redis.py would shadow the redis package from here on.
sys.path.remove(str(Path(__file__).resolve().parent))

from redis.client import Redis as SyncRedis
from tests.support import RedisServer

KINDS = ("bare", "wrapped", "redis")
LABELS = {"bare": "bare SDK", "wrapped": "memory storage", "redis": "Redis storage"}


def redis_counters(port: int) -> tuple[float, int, int]:
    """CPU seconds the redis-server at *port* has used (user + system), its commands
    served (script calls count one) and its script calls."""
    with SyncRedis(port=port, decode_responses=True) as client:
        cpu = client.info("cpu")
        stats = client.info("commandstats")
    commands = sum(int(s["calls"]) for s in stats.values())
    scripts = sum(int(stats.get(f"cmdstat_{n}", {}).get("calls", 0)) for n in ("evalsha", "eval"))
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]), commands, scripts


async def run_mode(args: argparse.Namespace, server: RedisServer, json_response: bool) -> None:
    mode = "JSON" if json_response else "SSE"
    servers = {kind: start_server(kind, json_response, redis_url=server.url) for kind in KINDS}
    results: dict[str, list[Result]] = {kind: [] for kind in KINDS}
    redis_per_request: list[float] = []
    scripts_per_request: list[float] = []
    commands_per_request: list[float] = []
    try:
        for round_ in range(args.rounds):
            order = KINDS if round_ % 2 == 0 else tuple(reversed(KINDS))
            for kind in order:
                process, url = servers[kind]
                before = redis_counters(server.port)
                result = await drive(url, tool_call, args.concurrency, args.duration, process.pid)
                results[kind].append(result)
                if kind == "redis":
                    after = redis_counters(server.port)
                    # (The warm-up's requests count too: the figures are per request.)
                    requests = result.rps * (args.duration + min(1.0, args.duration / 4))
                    redis_per_request.append((after[0] - before[0]) / requests)
                    commands_per_request.append((after[1] - before[1] - 2) / requests)
                    scripts_per_request.append((after[2] - before[2]) / requests)
    finally:
        for process, _ in servers.values():
            process.terminate()
            process.wait(timeout=10)
    print(
        f"\n{mode} responses, {args.concurrency} concurrent clients, tools/call echo, "
        f"{args.rounds} rounds x {args.duration:g} s (medians over the rounds)"
    )
    cpu = {k: statistics.median(r.cpu or 0.0 for r in results[k]) for k in KINDS}
    p50 = {k: statistics.median(r.p50 for r in results[k]) for k in KINDS}
    rps = {k: statistics.median(r.rps for r in results[k]) for k in KINDS}
    for kind in KINDS:
        print(
            f"  {LABELS[kind]:<16} {rps[kind]:8.1f} req/s  p50 {p50[kind] * 1e3:6.2f} ms  "
            f"server CPU {cpu[kind] * 1e6:7.0f} us/req ({cpu[kind] / cpu['bare']:.2f}x bare)"
        )
    redis_us = statistics.median(redis_per_request) * 1e6
    print(
        f"  redis-server CPU per request life: {redis_us:.1f} us "
        f"({statistics.median(scripts_per_request):.2f} script calls and "
        f"{statistics.median(commands_per_request):.2f} commands per request)"
    )
    ratio = cpu["redis"] / cpu["wrapped"]
    check(
        f"{mode}: server CPU per request with Redis <= 1.10x the memory storage's",
        ratio <= 1.10,
        f"{ratio:.3f}x",
    )
    check(f"{mode}: Redis CPU per request life <= 40 us", redis_us <= 40, f"{redis_us:.1f} us")
    added = (p50["redis"] - p50["wrapped"]) * 1e3
    check(
        f"{mode}: p50 with Redis <= the memory storage's + 1 ms", added <= 1.0, f"{added:+.2f} ms"
    )


async def run(args: argparse.Namespace) -> None:
    modes = {"json": [True], "sse": [False], "both": [True, False]}[args.mode]
    with RedisServer() as server:
        for json_response in modes:
            await run_mode(args, server, json_response)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--duration", type=float, default=2.0, help="seconds per round")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--mode", choices=["json", "sse", "both"], default="both")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
