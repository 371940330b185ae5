"""``mcp-cancellation client``: start a long tool call on the demo and cancel it, three ways.

Against ``mcp-cancellation demo`` (or ``examples/sdk_server.py``,
``examples/fastmcp_server.py``: any server with a ``slow_count(seconds)`` tool behind
:class:`~mcp_cancellation.CancellationMiddleware`), in SSE or JSON-response mode:

1. **raw HTTP**: POST ``tools/call`` (id ``"demo-1"``), and after ``--after`` seconds POST
   ``notifications/cancelled`` for it on a *second* connection. The middleware records it
   (202) and the call answers the JSON-RPC error ``-32800 Request cancelled``.
2. **the mcp client, protocol 2025-11-25**: the caller cancels ``call_tool``; the SDK's
   client then POSTs ``notifications/cancelled`` for the call, which the server records.
3. **the mcp client, protocol 2026-07-28**: the caller cancels ``call_tool``; that
   protocol has no client-to-server notifications on HTTP, so the client closes the
   call's stream, and the server treats the disconnect as the cancellation.

The server logs one line per cancelled call, saying how it ended.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from ._extras import requires

with requires("mcp", "mcp-cancellation client"):
    import anyio
    import httpx
    from mcp import Client

__all__ = ["add_parser", "run"]

HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
#: The protocol versions of steps 2 and 3, as the SDK's ``Client(mode=...)`` names them.
LEGACY, MODERN = "legacy", "2026-07-28"


async def raw_http(url: str, after: float) -> dict[str, Any] | None:
    """Step 1; returns the call's final JSON-RPC message."""
    call = {
        "jsonrpc": "2.0",
        "id": "demo-1",
        "method": "tools/call",
        "params": {
            "name": "slow_count",
            "arguments": {"seconds": 30},
            "_meta": {"progressToken": 1},
        },
    }
    cancel = {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": "demo-1", "reason": "mcp-cancellation client changed its mind"},
    }
    final: dict[str, Any] | None = None
    # Idle connections expire long before the server's keep-alive timeout (see
    # mcp_cancellation.simulate.KEEPALIVE_EXPIRY).
    limits = httpx.Limits(keepalive_expiry=1.0)
    async with httpx.AsyncClient(timeout=60, limits=limits, trust_env=False) as http:

        async def cancel_later() -> None:
            await anyio.sleep(after)
            answer = await http.post(url, json=cancel, headers=HEADERS)
            print(f"  notifications/cancelled answered HTTP {answer.status_code}")

        async with anyio.create_task_group() as tg:
            tg.start_soon(cancel_later)
            async with http.stream("POST", url, json=call, headers=HEADERS) as response:
                async for line in response.aiter_lines():
                    line = line.strip()
                    if line.startswith("data:"):
                        line = line[5:].strip()
                    if not line.startswith("{"):
                        continue
                    message = json.loads(line)
                    if message.get("method") == "notifications/progress":
                        print(f"  progress {message['params'].get('progress')}")
                    elif "error" in message:
                        final = message
                        print(f"  tools/call answered error {message['error']}")
                    elif "result" in message:
                        final = message
                        print(f"  tools/call completed: {message['result']}")
    return final


async def with_client(url: str, after: float, mode: str) -> bool:
    """Steps 2 and 3: cancel ``call_tool`` after *after* seconds; whether it was cancelled."""
    cancelled = False
    try:
        async with Client(url, mode=mode) as client:
            with anyio.move_on_after(after) as scope:
                await client.call_tool("slow_count", {"seconds": 30})
            cancelled = scope.cancelled_caught
            if not cancelled:
                print("  the call completed before it could be cancelled")
            elif mode == LEGACY:
                print(f"  cancelled after {after} s: the client POSTed notifications/cancelled")
            else:
                print(f"  cancelled after {after} s: the client closed the call's stream")
            # One more round trip before the session closes, so the client's last
            # messages are out before its connections go.
            await client.list_tools()
    except* anyio.BrokenResourceError:
        # The mcp client (2.3) can fail its own shutdown when the abandoned call's late
        # answer (-32800) arrives just as the session closes; the cancellation was done.
        pass
    return cancelled


async def main(url: str, after: float) -> int:
    """All three steps; 0 when every call was cancelled."""
    print(f"1. raw HTTP: cancel from a second connection ({url})")
    final = await raw_http(url, after)
    ok = final is not None and final.get("error", {}).get("code") == -32800
    print("2. mcp client, protocol 2025-11-25: the client POSTs notifications/cancelled")
    ok = await with_client(url, after, LEGACY) and ok
    print("3. mcp client, protocol 2026-07-28: the client closes the call's stream")
    ok = await with_client(url, after, MODERN) and ok
    print("The server logged one line for each cancelled call.")
    return 0 if ok else 1


def add_parser(subparsers: Any) -> None:
    """Register ``client`` on the ``mcp-cancellation`` command."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "client",
        help="start a long tool call on the demo and cancel it, three ways",
        description=(__doc__ or "").split("\n\n")[0],
    )
    parser.add_argument(
        "--url", default="http://127.0.0.1:8000/mcp", help="the MCP endpoint (default %(default)s)"
    )
    parser.add_argument(
        "--after", type=float, default=2.0, help="seconds before cancelling (default %(default)s)"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run the three steps from parsed arguments."""
    return asyncio.run(main(args.url, args.after))
