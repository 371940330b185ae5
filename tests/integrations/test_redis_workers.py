"""Two workers sharing a real Redis (one server, or a cluster): a cancellation sent to one
stops the call on the other."""

from __future__ import annotations

import anyio
import httpx
import pytest

from mcp_cancellation import REQUEST_CANCELLED

from ..jsonrpc import SSE_AND_JSON, call_body, cancel_body, final_message
from ..support import async_wait_until, redis_url
from ._helpers import Serve, workers_sharing

pytestmark = [pytest.mark.e2e, pytest.mark.redis]


@pytest.mark.parametrize(
    "backend",
    [
        "redis",
        pytest.param("redis-cluster", marks=pytest.mark.cluster),
        pytest.param("redis-partitioned", marks=pytest.mark.cluster),
    ],
)
async def test_cancel_on_one_worker_stops_call_on_another(
    serve: Serve, http: httpx.AsyncClient, backend: str, request: pytest.FixtureRequest
) -> None:
    partitions = 3 if backend == "redis-partitioned" else 1
    async with workers_sharing(redis_url(backend, request), partitions=partitions) as registries:
        worker_a = serve("sdk", json_response=True, registry=registries[0])
        worker_b = serve("sdk", json_response=True, registry=registries[1])
        answers: list[httpx.Response] = []

        async def call() -> None:
            answers.append(
                await http.post(
                    worker_a.url,
                    json=call_body("shared", "poll", {"seconds": 30}),
                    headers=SSE_AND_JSON,
                )
            )

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await worker_a.wait_started()
            response = await http.post(
                worker_b.url, json=cancel_body("shared", "elsewhere"), headers=SSE_AND_JSON
            )
            assert response.status_code == 202
        answer = final_message(answers[0])
        assert answer["error"]["code"] == REQUEST_CANCELLED
        assert answer["error"]["data"] == {"reason": "elsewhere"}
        assert worker_b.cancellations[0]["scope"] == "ip:127.0.0.1"

        async def empty() -> bool:
            stats = await registries[1].stats()
            return stats.total_rows == 0 and stats.total_in_flight == 0

        await async_wait_until(empty, within=10)
