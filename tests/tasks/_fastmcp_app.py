"""The FastMCP twin of ``_app.py``: the same tools, declared as FastMCP declares tasks
(``task=True``, ``TaskConfig(mode="required")``), served by FastMCP with
``FastMCPTasksExtension`` behind ``CancellationMiddleware``: the task suite runs against
both servers. Run as ``python -m tests.tasks._fastmcp_app`` with ``_app.py``'s options.
"""

from __future__ import annotations

import asyncio
import time
import warnings
from datetime import timedelta
from typing import Any

from fastmcp import Context, FastMCP
from fastmcp.utilities.tasks import TaskConfig
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp_types import InputRequiredResult, SamplingMessage, TextContent
from pydantic import BaseModel

from mcp_cancellation import CancellationMiddleware, CancellationRegistry, cancelled
from mcp_cancellation.integrations.fastmcp import fastmcp_middleware, tool_names
from mcp_cancellation.tasks import FastMCPTasksExtension
from mcp_cancellation.telemetry import metrics_app

from ._app import ask_for_name, hold_the_gil, mark_stopped, serve


class Name(BaseModel):
    name: str


def build_fastmcp_tasks_app(registry: CancellationRegistry, **options: Any) -> Any:
    poll = timedelta(seconds=options.pop("poll_interval", 0.05))
    options.setdefault("kill_after", 0.5)
    optional = TaskConfig(mode="optional", poll_interval=poll)
    mcp = FastMCP("tasks", middleware=[fastmcp_middleware()])
    mcp.add_extension(FastMCPTasksExtension(registry, **options))

    @mcp.tool(task=optional)
    async def slow_count(n: int, ctx: Context, step: float = 0.02, marker: str = "") -> str:
        try:
            for i in range(n):
                if cancelled():
                    return f"stopped at {i}"
                await ctx.report_progress(i, n, f"counted {i}")
                await asyncio.sleep(step)
            return f"counted to {n}"
        finally:
            if marker:
                mark_stopped(marker)

    @mcp.tool(task=optional)
    async def stubborn(seconds: float, marker: str = "") -> str:
        await asyncio.sleep(seconds)  # never looks at its cancellation
        if marker:
            mark_stopped(marker)
        return "done anyway"

    @mcp.tool(task=optional)
    async def blocking(seconds: float, marker: str = "") -> str:
        time.sleep(seconds)  # blocks the event loop  # noqa: ASYNC251
        if marker:
            mark_stopped(marker)
        return f"blocked {seconds:g}s"

    @mcp.tool(task=optional)
    async def holding(seconds: float, marker: str = "") -> str:
        await asyncio.sleep(0.3)  # (its task is recorded meanwhile: the hold comes after)
        hold_the_gil(seconds)
        if marker:
            mark_stopped(marker)
        return f"held {seconds:g}s"

    @mcp.tool(task=optional)
    async def ask_name(ctx: Context) -> str:
        answers = [await ctx.elicit("Your name?", Name), await ctx.elicit("Again?", Name)]
        return " & ".join(a.data.name if a.action == "accept" else a.action for a in answers)

    @mcp.tool(task=optional)
    async def ask_both(ctx: Context) -> str:
        answers = await asyncio.gather(ctx.elicit("First?", Name), ctx.elicit("Second?", Name))
        return " & ".join(a.data.name if a.action == "accept" else a.action for a in answers)

    @mcp.tool(task=optional)
    async def sized(size: int) -> str:
        return "x" * size

    @mcp.tool(task=optional)
    async def broken() -> str:
        raise ValueError("broken on purpose")

    @mcp.tool(task=TaskConfig(mode="required", poll_interval=poll))
    async def required_job(seconds: float = 0.0) -> str:
        await asyncio.sleep(seconds)
        return "required done"

    @mcp.tool()
    async def quick() -> str:
        return "quick"

    @mcp.tool(task=optional)
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
        url = await ctx.session.elicit_url("Sign in", "https://example.invalid/login", "e-1")
        text = sampled.content.text if isinstance(sampled.content, TextContent) else "?"
        return f"{text} | {len(roots.roots)} roots | {url.action}"

    @mcp.tool(task=optional)
    async def input_first(ctx: Context, seconds: float = 0.3) -> str | InputRequiredResult:
        """Asks for a name first (an input round, SEP-2322), then works on it."""
        answer = (ctx.input_responses or {}).get("name")
        if answer is None:
            return InputRequiredResult(input_requests={"name": ask_for_name()})
        await asyncio.sleep(seconds)
        content = getattr(answer, "content", None) or {}
        return f"hello {content.get('name', '?')}"

    app = mcp.http_app(stateless_http=True, json_response=True)
    middleware = CancellationMiddleware(
        app, registry=registry, tools=tool_names(mcp), trusted_proxies=["127.0.0.1"]
    )
    metrics = metrics_app(registry)

    async def route(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/metrics":
            await metrics(scope, receive, send)
        else:
            await middleware(scope, receive, send)

    return route


if __name__ == "__main__":
    serve(build_fastmcp_tasks_app)
