"""Many concurrent calls on one event loop, as a busy server makes them: all succeed."""

from __future__ import annotations

import asyncio

from mcp_cancellation import CancellationRegistry, RequestToken

from ._util import in_flight, rows

BURST = 250


async def test_a_burst_of_concurrent_cancellations(registry: CancellationRegistry) -> None:
    scopes = [f"ip:192.0.2.{n}" for n in range(10)]
    await asyncio.gather(*(registry.cancel(n, "burst", scope=scopes[n % 10]) for n in range(BURST)))
    assert await rows(registry) == dict.fromkeys(scopes, BURST // 10)


async def test_many_concurrent_requests_each_cancelled(registry: CancellationRegistry) -> None:
    entered = 0
    all_in = asyncio.Event()
    release = asyncio.Event()
    tokens: list[RequestToken] = []

    async def serve(n: int) -> None:
        nonlocal entered
        async with registry.request(n, scope=f"session:{n % 7}") as token:
            tokens.append(token)
            entered += 1
            if entered == BURST:
                all_in.set()
            await release.wait()

    tasks = [asyncio.create_task(serve(n)) for n in range(BURST)]
    await all_in.wait()
    assert sum((await in_flight(registry)).values()) == BURST
    recorded = await asyncio.gather(
        *(registry.cancel_in_flight(n, "stop", scope=f"session:{n % 7}") for n in range(BURST))
    )
    assert all(recorded)
    assert all(token.cancelled for token in tokens)
    release.set()
    await asyncio.gather(*tasks)
    assert await in_flight(registry) == {}
    assert await rows(registry) == {}
