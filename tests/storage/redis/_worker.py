"""One uvicorn worker process for the multi-worker tests: the demo MCP app behind
CancellationMiddleware, its registry on a shared Redis.

Run as ``python -m tests.storage.redis._worker --port P --redis-url URL --prefix PREFIX``.
"""

from __future__ import annotations

import argparse
import logging
import time
from typing import Any

import uvicorn

from mcp_cancellation import CancellationRegistry
from mcp_cancellation._demo import build_demo_app
from mcp_cancellation.storage.redis import RedisStorage

POLL_INTERVAL = 0.05


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--heartbeat-ttl", type=float, default=1.0)
    parser.add_argument("--janitor-interval", type=float, default=0.5)
    parser.add_argument("--sse", type=float, default=0.0, help="1: SSE responses, not JSON")
    parser.add_argument("--track-wait", type=float, default=0.5, help="the registry's")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    storage = RedisStorage.from_url(
        args.redis_url,
        prefix=args.prefix,
        heartbeat_ttl=args.heartbeat_ttl,
        socket_timeout=0.5,
        connect_timeout=0.5,
        timeout=1.5,
        reconnect_backoff=(0.05, 0.3),
    )
    registry = CancellationRegistry(
        storage, janitor_interval=args.janitor_interval, track_wait=args.track_wait
    )
    app = hogging(build_demo_app(registry, json_response=not args.sse, poll_interval=POLL_INTERVAL))
    # Idle connections outlive the test client's keep-alive (see tests/support.py).
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        lifespan="on",
        timeout_keep_alive=30,
    )


def hogging(app: Any) -> Any:
    """*app*, plus ``POST /hog?ms=N``: N milliseconds of CPU-bound work on the event loop
    (what a busy worker's loop does between two requests), answered 204 after."""

    async def serve(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/hog":
            query = dict(p.split("=", 1) for p in scope["query_string"].decode().split("&") if p)
            deadline = time.monotonic() + int(query.get("ms", "0")) / 1000
            while time.monotonic() < deadline:  # busy: nothing else runs on this loop
                pass
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        await app(scope, receive, send)

    return serve


if __name__ == "__main__":
    main()
