"""Plain HTTP MCP traffic for the dashboard tests: long calls held open, cancellations from
chosen client addresses (the demos run behind ``--trusted-proxy 127.0.0.1``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx

from ..jsonrpc import SSE_AND_JSON, call_body, cancel_body


def as_client(address: str) -> dict[str, str]:
    return {**SSE_AND_JSON, "x-forwarded-for": address}


@contextlib.asynccontextmanager
async def held_calls(
    client: httpx.AsyncClient, url: str, address: str, ids: range, seconds: float = 60
) -> AsyncIterator[None]:
    """``stubborn_sleep`` calls (they ignore cancellation) from *address*, held open for
    the block, then abandoned (the server kills them after its stream-cancel timeout)."""
    tasks: list[asyncio.Task[None]] = []

    async def call(request_id: int) -> None:
        body = call_body(request_id, "stubborn_sleep", {"seconds": seconds})
        async with client.stream("POST", url, json=body, headers=as_client(address)) as reply:
            async for _ in reply.aiter_raw():
                pass

    for request_id in ids:
        tasks.append(asyncio.create_task(call(request_id)))
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def cancel(client: httpx.AsyncClient, url: str, address: str, request_id: Any) -> int:
    """Send ``notifications/cancelled`` for *request_id* as *address*; the HTTP status."""
    body = cancel_body(request_id, "test")
    reply = await client.post(url, content=json.dumps(body), headers=as_client(address))
    return reply.status_code
