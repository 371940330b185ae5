"""The MCP app of the task tests: an SDK server with TasksExtension behind
CancellationMiddleware. Its tools: ``slow_count`` (polls its cancellation, reports
progress), ``stubborn`` (ignores it), ``ask_name`` (elicits), ``sized`` (a result of a
given size), ``broken`` (a tool error), ``blocking`` (blocks its event loop),
``holding`` (holds the interpreter lock, as one long C call does),
``ask_both`` (two questions at once), ``server_requests`` (sampling, roots and a URL
elicitation, and a log message) and ``quick`` (a plain tool, never a task). A tool given
a ``marker`` sets that key in the Redis at ``$MCP_BENCH_MARKER_URL`` once it ends.

Run as ``python -m tests.tasks._app --port P --redis-url URL --prefix PREFIX`` for a
worker process of its own (which also serves ``POST /hog?ms=N``: a busy event loop).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import time
import warnings
from typing import Any

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp_types import (
    ElicitRequest,
    ElicitRequestFormParams,
    InputRequiredResult,
    SamplingMessage,
    TextContent,
)
from pydantic import BaseModel

from mcp_cancellation import CancellationMiddleware, CancellationRegistry, cancelled
from mcp_cancellation.tasks import TasksExtension, TaskSupport
from mcp_cancellation.telemetry import metrics_app

TASK_TOOLS = {
    "slow_count",
    "stubborn",
    "ask_name",
    "sized",
    "broken",
    "blocking",
    "holding",
    "ask_both",
    "server_requests",
    "input_first",
}
#: Tools that run only as tasks (SEP-2663 task support ``required``).
REQUIRED_TOOLS = {"required_job"}


class Name(BaseModel):
    name: str


def mark_stopped(key: str) -> None:
    """Set *key* in the Redis at ``$MCP_BENCH_MARKER_URL`` (the benchmark's stop watch)."""
    from redis.client import Redis

    url = os.environ.get("MCP_BENCH_MARKER_URL")
    if url:
        with Redis.from_url(url) as client:
            client.set(key, "1", ex=60)


def hold_the_gil(seconds: float) -> None:
    """Hold the interpreter lock for *seconds*, as one long C call does (a regular
    expression, ``sum(range(n))``): ``sleep`` called through ``ctypes.PyDLL`` keeps the
    lock, so no thread of the process runs meanwhile."""
    import ctypes

    ctypes.PyDLL(None).usleep(int(seconds * 1_000_000))


def ask_for_name() -> ElicitRequest:
    """The question ``input_first`` asks before its task."""
    return ElicitRequest(
        params=ElicitRequestFormParams(
            message="Your name?",
            requested_schema={
                "type": "object",
                "properties": {"name": {"type": "string"}},
                "required": ["name"],
            },
        )
    )


def build_tasks_app(registry: CancellationRegistry, **options: Any) -> Any:
    options.setdefault("poll_interval", 0.05)
    options.setdefault("kill_after", 0.5)
    support: dict[str, TaskSupport] = dict.fromkeys(TASK_TOOLS, "optional")
    support.update(dict.fromkeys(REQUIRED_TOOLS, "required"))
    support["quick"] = "forbidden"
    extension = TasksExtension(registry, tools=support, **options)
    server = MCPServer("tasks", extensions=[extension], middleware=[extension])

    @server.tool()
    async def slow_count(n: int, ctx: Context, step: float = 0.02, marker: str = "") -> str:
        try:
            for i in range(n):
                if cancelled():
                    return f"stopped at {i}"
                await ctx.report_progress(i, n, f"counted {i}")
                await asyncio.sleep(step)
            return f"counted to {n}"
        finally:
            if marker:  # benchmarks/tasks.py: when the tool stopped, seen from outside
                mark_stopped(marker)

    @server.tool()
    async def stubborn(seconds: float, marker: str = "") -> str:
        await asyncio.sleep(seconds)  # never looks at its cancellation
        if marker:
            mark_stopped(marker)
        return "done anyway"

    @server.tool()
    async def blocking(seconds: float, marker: str = "") -> str:
        time.sleep(seconds)  # blocks the event loop (a sync client, CPU work)  # noqa: ASYNC251
        if marker:
            mark_stopped(marker)
        return f"blocked {seconds:g}s"

    @server.tool()
    async def holding(seconds: float, marker: str = "") -> str:
        await asyncio.sleep(0.3)  # (its task is recorded meanwhile: the hold comes after)
        hold_the_gil(seconds)
        if marker:
            mark_stopped(marker)
        return f"held {seconds:g}s"

    @server.tool()
    async def ask_both(ctx: Context) -> str:
        first, second = await asyncio.gather(
            ctx.elicit("First?", Name), ctx.elicit("Second?", Name)
        )
        answers = (first, second)
        return " & ".join(a.data.name if a.action == "accept" else a.action for a in answers)

    @server.tool()
    async def server_requests(ctx: Context) -> str:
        # (Logging, sampling and roots are deprecated at 2026-07-28, and still served.)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            await ctx.info("logged inside a task")
            sampled = await ctx.session.create_message(
                [SamplingMessage(role="user", content=TextContent(type="text", text="Hi?"))],
                max_tokens=5,
            )
            roots = await ctx.session.list_roots()
        url = await ctx.elicit_url("Sign in", "https://example.invalid/login", "e-1")
        text = sampled.content.text if isinstance(sampled.content, TextContent) else "?"
        return f"{text} | {len(roots.roots)} roots | {url.action}"

    @server.tool()
    async def ask_name(ctx: Context) -> str:
        answers = [await ctx.elicit("Your name?", Name), await ctx.elicit("Again?", Name)]
        return " & ".join(a.data.name if a.action == "accept" else a.action for a in answers)

    @server.tool()
    async def sized(size: int) -> str:
        return "x" * size

    @server.tool()
    async def broken() -> str:
        raise ValueError("broken on purpose")

    @server.tool()
    async def quick() -> str:
        return "quick"

    @server.tool()
    async def required_job(seconds: float = 0.0) -> str:
        await asyncio.sleep(seconds)
        return "required done"

    @server.tool()
    async def input_first(ctx: Context, seconds: float = 0.3) -> str | InputRequiredResult:
        """Asks for a name first (an input round, SEP-2322), then works on it."""
        answers = ctx.input_responses or {}
        answer = answers.get("name")
        if answer is None:
            return InputRequiredResult(input_requests={"name": ask_for_name()})
        await asyncio.sleep(seconds)
        content = getattr(answer, "content", None) or {}
        return f"hello {content.get('name', '?')}"

    app = server.streamable_http_app(stateless_http=True, json_response=True)
    middleware = CancellationMiddleware(
        app,
        registry=registry,
        tools=TASK_TOOLS | REQUIRED_TOOLS | {"quick"},
        trusted_proxies=["127.0.0.1"],
    )
    metrics = metrics_app(registry)

    async def route(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/metrics":
            await metrics(scope, receive, send)
        else:
            await middleware(scope, receive, send)

    return route


def main() -> None:
    serve(build_tasks_app)


def serve(build: Any) -> None:
    """Serve the app *build* makes (``build(registry, **options)``) as a worker process,
    with the options of the command line (see the module docstring)."""
    from mcp_cancellation.storage import Storage
    from mcp_cancellation.storage.redis import PartitionedRedisStorage, RedisStorage

    from ..storage.redis._worker import hogging

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--partitions", type=int, default=0)
    parser.add_argument("--heartbeat-ttl", type=float, default=1.0)
    parser.add_argument("--ttl", type=float, default=600.0)
    parser.add_argument("--quota", type=int, default=3)
    parser.add_argument("--max-tasks", type=int, default=10_000)
    parser.add_argument("--drain-timeout", type=float, default=0.5)
    parser.add_argument("--kill-after", type=float, default=0.5)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO if os.environ.get("TASKS_APP_INFO") else logging.WARNING)
    options: dict[str, Any] = {"prefix": args.prefix, "heartbeat_ttl": args.heartbeat_ttl}
    storage: Storage
    if args.partitions:
        storage = PartitionedRedisStorage.from_url(
            args.redis_url, partitions=args.partitions, **options
        )
    else:
        storage = RedisStorage.from_url(args.redis_url, **options)
    registry = CancellationRegistry(storage, janitor_interval=0.5)
    uvicorn.run(
        # POST /hog?ms=N: N ms of CPU-bound work on the worker's loop (see hogging).
        hogging(
            build(
                registry,
                ttl=args.ttl,
                max_tasks_per_scope=args.quota,
                max_tasks=args.max_tasks,
                drain_timeout=args.drain_timeout,
                kill_after=args.kill_after,
            )
        ),
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        lifespan="on",
        timeout_keep_alive=30,
    )


if __name__ == "__main__":
    main()
