"""The same cancellable server with FastMCP.

Run:  python examples/fastmcp_server.py                (uvicorn.run(app))
      python examples/fastmcp_server.py --fastmcp-run  (mcp.run(transport="http"))
(then: ./dev client, or python examples/client_cancel.py)

FastMCP turns every exception a tool raises into an error *result*, so the conversion to
JSON-RPC ``-32800`` is done by ``fastmcp_middleware()`` in FastMCP's middleware chain.
The ASGI middleware goes in ``http_app(middleware=[...])``, inside FastMCP's own
authentication middleware, so that an authenticated user is the cancellation scope.
"""

from __future__ import annotations

import argparse

import anyio
import uvicorn
from fastmcp import Context, FastMCP
from starlette.middleware import Middleware

from mcp_cancellation import CancellationMiddleware, CancellationRegistry, raise_if_cancelled
from mcp_cancellation.integrations.fastmcp import fastmcp_middleware, tool_names
from mcp_cancellation.logs import log_to_stderr

mcp = FastMCP("cancellable-fastmcp-server", middleware=[fastmcp_middleware()])


@mcp.tool
async def slow_count(seconds: int, ctx: Context) -> str:
    """Count to `seconds`, one per second; stops within 0.1 s of a cancellation."""
    for second in range(seconds):
        for _ in range(10):
            raise_if_cancelled()
            await anyio.sleep(0.1)
        await ctx.report_progress(second + 1, seconds)
    return f"counted to {seconds}"


registry = CancellationRegistry()
middleware = [
    Middleware(CancellationMiddleware, registry=registry, path="/mcp", tools=tool_names(mcp))
]
app = mcp.http_app(path="/mcp", stateless_http=True, middleware=middleware)

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--fastmcp-run",
        action="store_true",
        help="serve with FastMCP's own mcp.run(transport='http'), given the same middleware",
    )
    args = parser.parse_args()
    log_to_stderr()  # one INFO line per cancelled call: scope kind, id, reason, how it ended
    if args.fastmcp_run:
        mcp.run(
            transport="http",
            host="127.0.0.1",
            port=args.port,
            path="/mcp",
            stateless_http=True,
            middleware=middleware,
            show_banner=False,
        )
    else:
        uvicorn.run(app, host="127.0.0.1", port=args.port)
