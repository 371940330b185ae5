"""Two worker processes on one Redis Cluster: ``mcp-cancellation demo --redis
redis+cluster://...`` twice, as a user runs it. A call served by one is cancelled by a
notification sent to the other, and stops there; the table is empty afterwards."""

from __future__ import annotations

import uuid
from pathlib import Path

import anyio
import httpx
import pytest

from mcp_cancellation import REQUEST_CANCELLED, CancellationRegistry, RedisStorage

from ..jsonrpc import SSE_AND_JSON, call_body, cancel_body, final_message
from ..processes import DemoProcess
from ..support import RedisClusterServers, async_wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.redis, pytest.mark.cluster]


async def test_a_cancel_sent_to_one_process_stops_the_call_on_the_other(
    redis_cluster: RedisClusterServers, tmp_path: Path
) -> None:
    prefix = f"workers-{uuid.uuid4().hex[:8]}"
    shared = ("--redis", redis_cluster.url, "--redis-prefix", prefix, "--log-level", "warning")
    # The test's own view of the shared table, to wait for the call to be in flight.
    observer = CancellationRegistry(
        RedisStorage.from_url(redis_cluster.url, prefix=prefix), janitor_interval=None
    )
    try:
        with (
            DemoProcess(*shared, "--json-response", log=tmp_path / "worker-a.log") as a,
            DemoProcess(*shared, log=tmp_path / "worker-b.log") as b,
        ):
            answers: list[httpx.Response] = []
            async with httpx.AsyncClient(timeout=60, trust_env=False) as http:

                async def call() -> None:
                    body = call_body("job-1", "slow_count", {"seconds": 60})
                    answers.append(await http.post(f"{a.url}/mcp", json=body, headers=SSE_AND_JSON))

                async with anyio.create_task_group() as tg:
                    tg.start_soon(call)
                    await async_wait_until(
                        lambda: observer.in_flight("job-1", "ip:127.0.0.1"), within=30
                    )
                    response = await http.post(
                        f"{b.url}/mcp", json=cancel_body("job-1", "from b"), headers=SSE_AND_JSON
                    )
                    assert response.status_code == 202
            answer = final_message(answers[0])
            assert answer["error"]["code"] == REQUEST_CANCELLED, answer
            assert answer["error"]["data"] == {"reason": "from b"}

            async def empty() -> bool:
                stats = await observer.stats()
                return stats.total_rows == 0 and stats.total_in_flight == 0

            await async_wait_until(empty, within=15)
    finally:
        await observer.aclose()
