"""An eviction batch split over several scripts (``RedisStorage(eviction_chunk=...)``)
evicts exactly what one script would, reports it the same way, and no script evicts more
than its chunk, so no single script holds Redis for long."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis

from mcp_cancellation.storage._base import Limits
from mcp_cancellation.storage.redis import RedisStorage

from ...registry._model import Model
from ...support import RedisServer
from ._helpers import (
    assert_layout_in_step,
    calls_between,
    command_calls,
    settled,
)

#: (Tables of tens of thousands of rows: seconds each, left out of ./dev quick.)
pytestmark = [pytest.mark.redis, pytest.mark.slow]

SCOPES = ["ip:a", "ip:b", "ip:c", "principal:d", "session:e", "ip:f"]


def _expected_eviction(model: Model, batch: int) -> list[tuple[str, int]]:
    """What the cap takes next: whole scopes in eviction order, the last one part-way."""
    taken: list[tuple[str, int]] = []
    for scope, count in model.eviction_order():
        if batch == 0:
            break
        take = min(batch, count)
        taken.append((scope, take))
        batch -= take
    return taken


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    cap=st.integers(min_value=20, max_value=140),
    chunk=st.integers(min_value=1, max_value=4),
    order=st.lists(st.sampled_from(SCOPES), min_size=140, max_size=140),
    singles=st.integers(min_value=0, max_value=40),
)
async def test_a_chunked_batch_evicts_what_one_script_would(
    own_redis: RedisServer, cap: int, chunk: int, order: list[str], singles: int
) -> None:
    limits = Limits(max_rows=cap, max_rows_per_scope=None)
    batch = limits.eviction_batch
    # Some large scopes, then (an address-rotation flood) one-row scopes, to the cap.
    fill = [(scope, f"k{i}") for i, scope in enumerate(order[: max(0, cap - singles)])]
    fill += [(f"ip:flood-{i}", "1") for i in range(cap - len(fill))]
    model = Model(max_rows=cap, quota=None)
    for i, (scope, key) in enumerate(fill):
        model.add(scope, key, None, float(i))
    expected = _expected_eviction(model, batch)
    model.add("ip:new", "1", None, float(cap))

    # A server of its own: the checks scan the keyspace, which the session's server fills.
    url = own_redis.url
    stores = {
        "one script": RedisStorage.from_url(url, prefix="chunks-1", eviction_chunk=None),
        "chunked": RedisStorage.from_url(url, prefix="chunks-n", eviction_chunk=chunk),
    }
    raw = Redis.from_url(url)  # the same server, to count its commands
    try:
        await _wipe(raw)
        for storage in stores.values():
            for scope, key in fill:
                assert (await storage.add(scope, key, None, limits=limits)).evicted == ()
            await settled(storage)  # its listener's own scripts are done
        for name, storage in stores.items():
            before = await command_calls(raw)
            result = await storage.add("ip:new", "1", None, limits=limits)
            calls = await calls_between(raw, before)
            assert result.outcome == "recorded", name
            assert list(result.evicted) == expected, name
            assert (await storage.stats()).rows == model.counts(), name
            await assert_layout_in_step(raw, storage)
            scripts = calls.get("evalsha", 0) + calls.get("eval", 0)
            assert scripts == (1 if name == "one script" else math.ceil(batch / chunk)), name
    finally:
        await _wipe(raw)
        await raw.aclose()
        for storage in stores.values():
            await storage.aclose()


async def _wipe(client: Redis) -> None:
    """Delete both storages' keys (hypothesis runs many examples on one prefix each)."""
    keys = [key async for key in client.scan_iter(match=b"{chunks-*")]
    if keys:
        await client.delete(*keys)
