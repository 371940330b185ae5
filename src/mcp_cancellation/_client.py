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

A server behind ``CancellationMiddleware`` logs one line per cancelled call, saying how
it ended (at INFO, logger ``mcp_cancellation.asgi``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

from ._extras import requires
from ._redaction import redact_url, scrub

with requires("mcp", "mcp-cancellation client"):
    import anyio
    import httpx
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

__all__ = ["add_parser", "run"]

HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
#: The protocol versions of steps 2 and 3, as the SDK's ``Client(mode=...)`` names them.
LEGACY, MODERN = "legacy", "2026-07-28"
#: How long steps 2 and 3 wait, before the client closes, for the answers still owed to
#: their POSTs (the cancelled call's late ``-32800`` above all).
ANSWER_WAIT = 10.0


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


class _PostsInFlight(httpx2.AsyncBaseTransport):
    """An HTTP transport that counts the POSTs whose response is not read and closed yet,
    so that a client can wait for the answers it is still owed before it closes.

    The mcp client (2.3) fails its own shutdown (``BrokenResourceError`` or
    ``ClosedResourceError`` out of ``async with Client``) when an answer is handed to the
    session while the session closes: in SSE and in JSON mode, the late ``-32800`` of a
    call cancelled with ``notifications/cancelled``, which comes on the call's own POST.
    """

    def __init__(self, inner: httpx2.AsyncBaseTransport | None = None) -> None:
        self._inner = inner if inner is not None else httpx2.AsyncHTTPTransport()
        self.open = 0
        self._changed = anyio.Event()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.method != "POST":
            return await self._inner.handle_async_request(request)
        self._add(1)
        try:
            response = await self._inner.handle_async_request(request)
        except BaseException:
            self._add(-1)
            raise
        response.stream = _Closing(response.stream, lambda: self._add(-1))
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def idle(self) -> None:
        """Return once no POST is open."""
        while self.open:
            await self._changed.wait()

    def _add(self, step: int) -> None:
        self.open += step
        self._changed.set()
        self._changed = anyio.Event()


class _Closing(httpx2.AsyncByteStream):
    """A response body that reports, once, that it was closed."""

    def __init__(self, inner: Any, on_close: Callable[[], None]) -> None:
        self._inner = inner
        self._on_close: Callable[[], None] | None = on_close

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            yield chunk

    async def aclose(self) -> None:
        on_close, self._on_close = self._on_close, None
        try:
            await self._inner.aclose()
        finally:
            if on_close is not None:
                on_close()


async def with_client(url: str, after: float, mode: str) -> bool:
    """Steps 2 and 3: cancel ``call_tool`` after *after* seconds; whether it was cancelled."""
    cancelled = False
    posts = _PostsInFlight()
    # The SDK's default timeouts (a response stream may stay open for long).
    timeout = httpx2.Timeout(30.0, read=300.0)
    try:
        async with (
            httpx2.AsyncClient(timeout=timeout, transport=posts, trust_env=False) as http,
            Client(streamable_http_client(url, http_client=http), mode=mode) as client,
        ):
            with anyio.move_on_after(after) as scope:
                await client.call_tool("slow_count", {"seconds": 30})
            cancelled = scope.cancelled_caught
            if not cancelled:
                print("  the call completed before it could be cancelled")
            elif mode == LEGACY:
                print(f"  cancelled after {after} s: the client POSTed notifications/cancelled")
            else:
                print(f"  cancelled after {after} s: the client closed the call's stream")
            # Close only once no answer is left to arrive. A round trip first, so that
            # the client's notifications/cancelled is out (the transport POSTs messages
            # in order); then wait until no POST is open: every answer has been read off
            # the wire. In JSON mode the transport reads an answer's body, closes it, and
            # only then hands the message to the session, so one more round trip: its
            # answer is handed over after the late one, and the call returns after that.
            await client.list_tools()
            with anyio.move_on_after(ANSWER_WAIT):
                await posts.idle()
            await client.list_tools()
    except* (anyio.BrokenResourceError, anyio.ClosedResourceError):
        # Only when an answer is still owed after ANSWER_WAIT (a server that does not
        # stop the cancelled call) and arrives as the session closes; see _PostsInFlight.
        pass
    return cancelled


async def main(url: str, after: float) -> int:
    """All three steps; 0 when every call was cancelled."""
    print(f"1. raw HTTP: cancel from a second connection ({redact_url(url)})")
    final = await raw_http(url, after)
    ok = final is not None and final.get("error", {}).get("code") == -32800
    print("2. mcp client, protocol 2025-11-25: the client POSTs notifications/cancelled")
    ok = await with_client(url, after, LEGACY) and ok
    print("3. mcp client, protocol 2026-07-28: the client closes the call's stream")
    ok = await with_client(url, after, MODERN) and ok
    print(
        "A server behind CancellationMiddleware logs one line for each cancelled call "
        "(INFO, mcp_cancellation.asgi): look for three."
    )
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
    """Run the three steps from parsed arguments (a server that cannot be reached is
    one line, its URL without credentials)."""
    try:
        return asyncio.run(main(args.url, args.after))
    except (OSError, httpx.HTTPError, httpx2.HTTPError, ExceptionGroup) as exc:
        unreachable = (OSError, httpx.HTTPError, httpx2.HTTPError)
        if isinstance(exc, ExceptionGroup) and not exc.subgroup(unreachable):
            raise
        first = exc
        while isinstance(first, ExceptionGroup):
            first = first.exceptions[0]
        detail = scrub(first, [args.url])
        print(
            f"mcp-cancellation client: cannot reach {redact_url(args.url)}: {detail}",
            file=sys.stderr,
        )
        return 1
