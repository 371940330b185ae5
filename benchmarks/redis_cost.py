"""What the Redis storage costs a user, end to end: the app server's CPU and the Redis
server's CPU per request, against the memory storage in the same run.

Three uvicorn servers run the demo's stateless ``MCPServer`` in their own processes: bare,
behind ``CancellationMiddleware`` with the memory storage, and behind it with
``RedisStorage`` on a real redis-server this script starts. Concurrent httpx clients (16
by default) call the ``echo`` tool on each in turn, alternating rounds; every figure is
the median over the rounds (server CPU from ``/proc``, Redis CPU from ``INFO cpu``).

Printed with their goals (issue 74: a call is tracked only once it has run
``track_delay``, so a short call costs Redis nothing):

* short calls (``echo``): server CPU per call with Redis <= 1.05x the memory storage's,
  <= 0.1 Redis commands and <= 5 us of Redis CPU per call (beyond Redis's idle CPU over
  the same time, measured in the memory storage's round), p50 within +0.5 ms;
* calls that run one second (``slow_count``, 64 at a time, 3 each, 3 rounds): <= 60 us of
  Redis CPU per call life, over all the rounds (Redis counts its CPU in scheduler ticks:
  hundreds of lives keep that error to a few microseconds). Redis's own idle work over
  the same time (its cron), measured while the memory storage's server runs the same
  calls, is subtracted, and printed.

    python benchmarks/redis_cost.py [--duration 2] [--rounds 6] [--concurrency 16]
                                    [--mode json|sse|both] [--long-rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
from _common import check
from middleware import HEADERS, Result, drive, start_server, tool_call

# benchmarks/redis.py would shadow the redis package from here on.
sys.path.remove(str(Path(__file__).resolve().parent))

from redis.client import Redis as SyncRedis
from tests.support import RedisServer

KINDS = ("bare", "wrapped", "redis")
#: One-second calls at once (each client makes 3 in a row, each round).
LONG_CONCURRENCY = 64
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
    idle = 0.0
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
                after = redis_counters(server.port)
                if kind == "wrapped":  # Redis's idle CPU meanwhile (its cron, INFO)
                    idle = after[0] - before[0]
                if kind == "redis":
                    # (The warm-up's requests count too: the figures are per request.)
                    requests = result.rps * (args.duration + min(1.0, args.duration / 4))
                    redis_per_request.append((after[0] - before[0] - idle) / requests)
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
        f"  redis-server CPU per request life, beyond its idle: {redis_us:.1f} us "
        f"({statistics.median(scripts_per_request):.2f} script calls and "
        f"{statistics.median(commands_per_request):.2f} commands per request)"
    )
    ratio = cpu["redis"] / cpu["wrapped"]
    check(
        f"{mode}: short calls' server CPU with Redis <= 1.05x the memory storage's",
        ratio <= 1.05,
        f"{ratio:.3f}x",
    )
    commands = statistics.median(commands_per_request)
    check(f"{mode}: Redis commands per short call <= 0.1", commands <= 0.1, f"{commands:.3f}")
    check(f"{mode}: Redis CPU per short call <= 5 us", redis_us <= 5, f"{redis_us:.2f} us")
    added = (p50["redis"] - p50["wrapped"]) * 1e3
    check(
        f"{mode}: short calls' p50 with Redis <= the memory storage's + 0.5 ms",
        added <= 0.5,
        f"{added:+.2f} ms",
    )
    if args.long_rounds:
        await long_calls(args, server, servers_for_long(json_response, server), mode)
    if args.stop_trials:
        await cancel_to_stop(args, server, json_response, mode)


#: The ages at which cancel_to_stop() cancels a call (seconds).
AGES = (0.0, 0.1, 0.3, 1.0)


def cancel_body(request_id: int) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": request_id, "reason": "benchmark"},
    }


async def cancel_to_stop(
    args: argparse.Namespace, server: RedisServer, json_response: bool, mode: str
) -> None:
    """From a cancellation sent to one worker to the answer of the call it stops on the
    other, for calls of each age: every call tracked at its start (the baseline) against
    young calls (the default ``track_delay``). The tool polls every 10 ms."""
    medians: dict[str, dict[float, float]] = {}
    for label, delay in (("baseline", "0"), ("young", "")):
        saved = dict(os.environ)
        os.environ["MCP_CANCELLATION_BENCH_POLL"] = "0.01"
        if delay:
            os.environ["MCP_CANCELLATION_REDIS_TRACK_DELAY"] = delay
        try:
            pair = [start_server("redis", json_response, redis_url=server.url) for _ in "ab"]
        finally:
            os.environ.clear()
            os.environ.update(saved)
        try:
            (_, owner), (_, other) = pair
            medians[label] = {}
            async with httpx.AsyncClient(timeout=30) as client:
                for age in AGES:
                    samples = []
                    for _ in range(args.stop_trials):
                        body = slow_call()
                        body["params"]["arguments"]["seconds"] = 30
                        call = asyncio.create_task(client.post(owner, json=body, headers=HEADERS))
                        await asyncio.sleep(age)  # (the call's age when it is cancelled)
                        sent = time.perf_counter()
                        cancel = asyncio.create_task(
                            client.post(other, json=cancel_body(body["id"]), headers=HEADERS)
                        )
                        await call
                        samples.append(time.perf_counter() - sent)
                        await cancel
                    medians[label][age] = statistics.median(samples)
        finally:
            for process, _ in pair:
                process.terminate()
                process.wait(timeout=10)
    print(f"  cancel-to-stop across workers, p50 of {args.stop_trials} (baseline: track_delay=0)")
    for age in AGES:
        base, young = medians["baseline"][age] * 1e3, medians["young"][age] * 1e3
        print(f"    call {age:g} s old: {young:6.1f} ms against {base:6.1f} ms")
        check(
            f"{mode}: cancel-to-stop of a call {age:g} s old <= the baseline's + 10 ms",
            young <= base + 10,
            f"{young - base:+.1f} ms",
        )


def servers_for_long(json_response: bool, server: RedisServer) -> dict[str, tuple[Any, str]]:
    return {k: start_server(k, json_response, redis_url=server.url) for k in ("wrapped", "redis")}


def slow_call() -> dict[str, Any]:
    body = tool_call()
    body["params"] = {"name": "slow_count", "arguments": {"seconds": 1}}
    return body


async def one_second_calls(url: str, concurrency: int, each: int) -> int:
    """*concurrency* clients make *each* one-second calls one after another; the calls."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:

        async def calls() -> None:
            for _ in range(each):
                answer = await client.post(url, json=slow_call(), headers=HEADERS)
                answer.raise_for_status()

        await asyncio.gather(*(calls() for _ in range(concurrency)))
    return concurrency * each


async def long_calls(
    args: argparse.Namespace, server: RedisServer, servers: dict[str, tuple[Any, str]], mode: str
) -> None:
    """The Redis CPU of calls that run one second, per call life, less Redis's idle CPU
    over the same time (measured while the memory storage's server runs the same calls)."""
    cpu = {"wrapped": 0.0, "redis": 0.0}
    commands = lives = 0
    try:
        for _ in range(args.long_rounds):
            for kind in ("wrapped", "redis"):
                before = redis_counters(server.port)
                made = await one_second_calls(servers[kind][1], LONG_CONCURRENCY, 3)
                after = redis_counters(server.port)
                cpu[kind] += after[0] - before[0]
                if kind == "redis":
                    lives += made
                    commands += after[1] - before[1] - 2
    finally:
        for process, _ in servers.values():
            process.terminate()
            process.wait(timeout=10)
    us = (cpu["redis"] - cpu["wrapped"]) / lives * 1e6
    print(
        f"  one-second calls ({LONG_CONCURRENCY} at a time, {lives} lives): Redis CPU "
        f"{us:.1f} us per call life beyond Redis's idle {cpu['wrapped'] / lives * 1e6:.1f} us, "
        f"{commands / lives:.2f} commands per life"
    )
    check(f"{mode}: Redis CPU per one-second call life <= 60 us", us <= 60, f"{us:.1f} us")


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
    parser.add_argument("--long-rounds", type=int, default=3, help="0: no one-second calls")
    parser.add_argument("--stop-trials", type=int, default=8, help="0: no cancel-to-stop")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
