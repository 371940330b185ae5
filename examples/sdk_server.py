"""A stateless MCP server (the ``mcp`` SDK's ``MCPServer``) whose tool calls can be cancelled.

Run:  python examples/sdk_server.py [--port 8000] [--json-response]
(then: ./dev client, or python examples/client_cancel.py)

``CancellationMiddleware`` wraps the SDK's Starlette app; ``@cancellable`` makes a tool
that stops on :func:`raise_if_cancelled` answer JSON-RPC ``-32800 Request cancelled``.
"""

from __future__ import annotations

import argparse

import anyio
import uvicorn
from mcp.server.mcpserver import Context, MCPServer

from mcp_cancellation import CancellationMiddleware, CancellationRegistry, raise_if_cancelled
from mcp_cancellation.integrations import cancellable, tool_names

server = MCPServer("cancellable-sdk-server")


@server.tool()
@cancellable
async def slow_count(seconds: int, ctx: Context) -> str:
    """Count to `seconds`, one per second; stops within 0.1 s of a cancellation."""
    for second in range(seconds):
        for _ in range(10):
            raise_if_cancelled()  # RequestCancelled -> -32800 through @cancellable
            await anyio.sleep(0.1)
        await ctx.report_progress(second + 1, seconds)
    return f"counted to {seconds}"


registry = CancellationRegistry()


def make_app(json_response: bool = False) -> CancellationMiddleware:
    """The SDK's app (SSE answers, or one JSON body each) behind the middleware."""
    return CancellationMiddleware(
        server.streamable_http_app(stateless_http=True, json_response=json_response),
        registry=registry,
        path="/mcp",
        tools=tool_names(server),  # the tool label of the cancel-to-stop metrics
    )


app = make_app()

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--json-response", action="store_true", help="answer in JSON, not SSE")
    args = parser.parse_args()
    # MCPServer styles the root logger with Rich; the package's line per cancelled call
    # (scope kind, id, reason, worker, how it ended) still comes out as one plain line.
    uvicorn.run(make_app(args.json_response), host="127.0.0.1", port=args.port)
