"""Start a long tool call and cancel it, three ways, against the demo (or the examples).

Run the server first (``mcp-cancellation demo``, ``python examples/sdk_server.py`` or
``python examples/fastmcp_server.py``), then::

    python examples/client_cancel.py [--url http://127.0.0.1:8000/mcp] [--after 2]

1. raw HTTP: POST ``tools/call`` (id ``"demo-1"``), and after ``--after`` seconds POST
   ``notifications/cancelled`` for it on a *second* connection; the first stream then
   ends with the JSON-RPC error ``-32800 Request cancelled``;
2. the ``mcp`` client on protocol 2025-11-25: cancelling the call makes the client POST
   ``notifications/cancelled`` for it;
3. the ``mcp`` client on protocol 2026-07-28: cancelling the call closes its stream, and
   the disconnect is the cancellation.

The server logs every cancellation it records.
"""

from __future__ import annotations

import argparse
import asyncio
import json

import anyio
import httpx
from mcp import Client

HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


async def raw_http(url: str, after: float) -> None:
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
        "params": {"requestId": "demo-1", "reason": "client_cancel.py changed its mind"},
    }
    async with httpx.AsyncClient(timeout=60) as http:

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
                        print(f"  tool call answered error {message['error']}")
                    elif "result" in message:
                        print(f"  tool call completed: {message['result']}")


async def with_client(url: str, after: float, mode: str) -> None:
    async with Client(url, mode=mode) as client:
        with anyio.move_on_after(after) as scope:
            await client.call_tool("slow_count", {"seconds": 30})
        if scope.cancelled_caught:
            how = "POSTed notifications/cancelled" if mode == "legacy" else "closed its stream"
            print(f"  cancelled after {after} s: the client {how}; see the server's log")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--url", default="http://127.0.0.1:8000/mcp")
    parser.add_argument("--after", type=float, default=2.0, help="seconds before cancelling")
    args = parser.parse_args()
    print("1. raw HTTP: cancel from a second connection")
    await raw_http(args.url, args.after)
    print("2. mcp client, protocol 2025-11-25: notifications/cancelled")
    await with_client(args.url, args.after, "legacy")
    print("3. mcp client, protocol 2026-07-28: disconnect")
    await with_client(args.url, args.after, "2026-07-28")


if __name__ == "__main__":
    asyncio.run(main())
