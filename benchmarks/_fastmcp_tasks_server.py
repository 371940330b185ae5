"""The peer of ``benchmarks/tasks.py``: a FastMCP server with ``fastmcp-tasks`` (Docket on
Redis), serving the same tools as ``tests/tasks/_app.py``. It runs in the virtualenv of
the FastMCP tasks client (``fastmcp-tasks`` pins ``fastmcp-slim``), never in the project's.

    python _fastmcp_tasks_server.py --port P --redis-url URL --name QUEUE
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os

import uvicorn
from fastmcp import Context, FastMCP
from fastmcp_tasks import TasksExtension
from redis.client import Redis


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--name", required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    server = FastMCP("tasks-peer")
    server.add_extension(TasksExtension(url=args.redis_url, name=args.name))

    @server.tool(task=True)
    async def slow_count(n: int, ctx: Context, step: float = 0.02, marker: str = "") -> str:
        try:
            for i in range(n):
                await ctx.report_progress(i, n, f"counted {i}")
                await asyncio.sleep(step)  # its cancellation arrives here (CancelledError)
            return f"counted to {n}"
        finally:
            if marker:  # when the tool stopped, seen from outside
                with Redis.from_url(os.environ["MCP_BENCH_MARKER_URL"]) as client:
                    client.set(marker, "1", ex=60)

    @server.tool(task=True)
    async def sized(size: int) -> str:
        return "x" * size

    uvicorn.run(
        server.http_app(stateless_http=True, json_response=True),
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        timeout_keep_alive=30,
    )


if __name__ == "__main__":
    main()
