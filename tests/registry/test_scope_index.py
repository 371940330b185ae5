"""The scope-size index always agrees with the table: after every insert, update, removal,
eviction and expiry, what a scrape reads (``Storage.summary``: the largest scopes in
eviction order and the row totals by scope kind) is exactly what the reference model
computes from the rows, on every backend.

Few scopes and few ids, so that scopes grow, shrink from either end and tie in size (the
cases an incrementally kept index can get wrong)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcp_cancellation import CancellationLimitReached, CancellationRegistry, MemoryStorage
from mcp_cancellation.scope import scope_kind
from mcp_cancellation.storage import Storage

from ..support import RedisServer
from ._model import Model

SCOPES = ["ip:192.0.2.1", "session:a", "other", "global"]
IDS = range(4)

operations = st.lists(
    st.one_of(
        st.tuples(st.just("cancel"), st.sampled_from(SCOPES), st.sampled_from(IDS)),
        # ids 0 .. n-1 at once: scopes that grow and then shrink from either end
        st.tuples(st.just("fill"), st.sampled_from(SCOPES), st.integers(2, 4)),
        st.tuples(st.just("clear"), st.sampled_from(SCOPES), st.sampled_from(IDS)),
        st.tuples(st.just("wait"), st.sampled_from([1.0, 5.0]), st.just(0)),
        st.tuples(st.just("expire"), st.sampled_from([2.5, 6.0]), st.just(0)),
    ),
    min_size=4,
    max_size=50,
)
limits = st.tuples(st.sampled_from([None, 3, 6, 20]), st.sampled_from([None, 2, 4]))


def _check(storage: Storage, model: Model, loop: asyncio.AbstractEventLoop) -> None:
    order = model.eviction_order()
    for top_k, at_least in ((1, 1), (2, 2), (len(SCOPES), 3)):
        summary = loop.run_until_complete(storage.summary(top_k, at_least))
        assert list(summary.largest) == order[:top_k]
        assert summary.at_least == sum(1 for _, n in order if n >= at_least)
    kinds: dict[str, int] = {}
    for scope, n in order:
        kinds[scope_kind(scope)] = kinds.get(scope_kind(scope), 0) + n
    assert {kind: n for kind, n in summary.rows.items() if n} == kinds
    if isinstance(storage, MemoryStorage):
        storage.check_index()


def _run(
    make: Callable[[Callable[[], float]], Storage],
    bounds: tuple[int | None, int | None],
    ops: list[tuple[str, object, object]],
    *,
    expiry: bool,
) -> None:
    loop = asyncio.new_event_loop()
    now = [1_000.0]
    storage = make(lambda: now[0])
    max_rows, quota = bounds
    registry = CancellationRegistry(
        storage, max_rows=max_rows, max_rows_per_scope=quota, ttl=None, janitor_interval=None
    )
    model = Model(max_rows, quota)
    try:
        for op, a, b in ops:
            if op in ("cancel", "fill"):
                assert isinstance(a, str)
                assert isinstance(b, int)
                for request_id in range(b) if op == "fill" else [b]:
                    now[0] += 1.0
                    if model.add(a, str(request_id), "r", now[0]):
                        loop.run_until_complete(registry.cancel(request_id, "r", scope=a))
                    else:
                        with pytest.raises(CancellationLimitReached):
                            loop.run_until_complete(registry.cancel(request_id, "r", scope=a))
            elif op == "clear":
                assert isinstance(a, str)
                assert isinstance(b, int)
                model.remove(a, str(b))
                loop.run_until_complete(registry.clear(b, scope=a))
            elif op == "wait":
                assert isinstance(a, float)
                now[0] += a
            elif expiry:  # only where the test controls the storage's clock
                assert isinstance(a, float)
                model.expire(a, now[0])
                loop.run_until_complete(registry.cleanup(ttl=a))
            _check(storage, model, loop)
    finally:
        loop.run_until_complete(registry.aclose())
        loop.close()


@settings(max_examples=150, deadline=None)
@given(bounds=limits, ops=operations)
def test_the_index_agrees_with_the_table_in_memory(
    bounds: tuple[int | None, int | None], ops: list[tuple[str, object, object]]
) -> None:
    _run(lambda clock: MemoryStorage(clock=clock), bounds, ops, expiry=True)


@pytest.mark.redis
def test_the_index_agrees_with_the_table_on_redis(redis_server: RedisServer) -> None:
    """The same on a real redis-server (its own clock: no expiry steps)."""

    def make(clock: Callable[[], float]) -> Storage:
        from mcp_cancellation.storage.redis import RedisStorage

        return RedisStorage.from_url(redis_server.url, prefix=f"index-{uuid.uuid4().hex[:10]}")

    @settings(
        max_examples=40,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(bounds=limits, ops=operations)
    def check(bounds: tuple[int | None, int | None], ops: list[tuple[str, object, object]]) -> None:
        _run(make, bounds, ops, expiry=False)

    check()


def _flood(storage: Storage, now: list[float]) -> None:
    """Thousands of scopes, most with one row, some growing, some losing their oldest or
    newest row, past a cap that evicts in batches: more changed scopes between two reads
    of the index than the memory storage lets pile up before re-filing them (so both the
    re-filing at that bound and the one before each read run), checked against the model
    before each eviction's effect could hide an error and at the end."""
    import random

    from mcp_cancellation.storage._scope_table import CHANGED_LIMIT as _CHANGED_LIMIT

    scopes = 8 * _CHANGED_LIMIT
    max_rows = scopes  # fills, then evicts 5 % at a time
    loop = asyncio.new_event_loop()
    registry = CancellationRegistry(
        storage, max_rows=max_rows, max_rows_per_scope=None, ttl=None, janitor_interval=None
    )
    model = Model(max_rows, None)
    rng = random.Random(14)
    ids = [0] * scopes
    try:
        for step in range(4 * scopes):
            s = rng.randrange(scopes) if step >= scopes else step
            scope = f"ip:10.{s // 256}.{s % 256}.1"
            now[0] += 1.0
            roll = rng.random()
            if roll < 0.8 or not model.rows.get(scope):
                key = ids[s]
                ids[s] += 1
                assert model.add(scope, str(key), None, now[0])
                loop.run_until_complete(registry.cancel(key, None, scope=scope))
            else:  # its oldest row (its age changes) or its newest
                keys = list(model.rows[scope])
                key = int(keys[0] if roll < 0.9 else keys[-1])
                model.remove(scope, str(key))
                loop.run_until_complete(registry.clear(key, scope=scope))
            if step % (2 * _CHANGED_LIMIT + 1) == 0 or step == 4 * scopes - 1:
                order = model.eviction_order()
                summary = loop.run_until_complete(storage.summary(len(order) + 1, 2))
                assert list(summary.largest) == order
                assert summary.at_least == sum(1 for _, n in order if n >= 2)
                if isinstance(storage, MemoryStorage):
                    storage.check_index()
        assert loop.run_until_complete(storage.stats()).rows == model.counts()
    finally:
        loop.run_until_complete(registry.aclose())
        loop.close()


def test_the_index_agrees_with_the_table_through_a_flood_of_scopes_in_memory() -> None:
    now = [1_000.0]
    _flood(MemoryStorage(clock=lambda: now[0]), now)


@pytest.mark.redis
def test_the_index_agrees_with_the_table_through_a_flood_of_scopes_on_redis(
    redis_server: RedisServer,
) -> None:
    from mcp_cancellation.storage.redis import RedisStorage

    storage = RedisStorage.from_url(redis_server.url, prefix=f"flood-{uuid.uuid4().hex[:10]}")
    _flood(storage, [1_000.0])


# One scope per kind and number: the kind totals a bulk eviction or expiry of one-row
# scopes keeps must be right for every kind, the unprefixed ones included.
_KINDS = ("ip:10.2.{}.{}", "session:s{}-{}", "principal:p{}-{}", "custom-{}-{}")


def _mixed_flood(storage: Storage, now: list[float], *, expiry: bool) -> None:
    """A flood of one-row scopes of every kind, behind ``global`` and a few two-row
    scopes, evicted batch after batch (each batch mostly one-row scopes of mixed kinds,
    which the memory storage takes in bulk), then, where the test owns the clock, expired
    a part and then the rest (whole runs of one-row and two-row scopes at once)."""
    loop = asyncio.new_event_loop()
    max_rows = 600  # batches of 30
    registry = CancellationRegistry(
        storage, max_rows=max_rows, max_rows_per_scope=None, ttl=None, janitor_interval=None
    )
    model = Model(max_rows, None)

    def add(scope: str, key: int) -> None:
        now[0] += 1.0
        assert model.add(scope, str(key), None, now[0])
        loop.run_until_complete(registry.cancel(key, None, scope=scope))

    def check() -> None:
        _check(storage, model, loop)  # the top of the order, the kind totals, the index
        order = model.eviction_order()
        summary = loop.run_until_complete(storage.summary(len(order) + 1, 2))
        assert list(summary.largest) == order
        assert loop.run_until_complete(storage.stats()).rows == model.counts()

    try:
        for key in range(3):
            add("global", key)
        for i in range(400):
            for pattern in _KINDS:
                add(pattern.format(i // 100, i % 100), 0)
            if i % 25 == 0:  # a second row for some: two-row scopes among the singles
                add(_KINDS[i % 4].format(i // 100, i % 100), 1)
            if i % 10 == 9:
                check()
        # 1 218 rows went in: the cap evicted batch after batch.
        assert max_rows - max_rows // 20 < model.total <= max_rows
        assert not model.rows["global"]
        assert not model.rows["custom-2-0"]
        check()
        if expiry:
            model.expire(800.0, now[0])  # half the remaining rows, mixed kinds
            loop.run_until_complete(registry.cleanup(ttl=800.0))
            check()
            assert 0 < model.total < max_rows
            now[0] += 10.0
            model.expire(0.5, now[0])
            loop.run_until_complete(registry.cleanup(ttl=0.5))
            check()
            assert model.total == 0
    finally:
        loop.run_until_complete(registry.aclose())
        loop.close()


def test_one_row_scopes_of_every_kind_evicted_and_expired_in_bulk_in_memory() -> None:
    now = [1_000.0]
    _mixed_flood(MemoryStorage(clock=lambda: now[0]), now, expiry=True)


@pytest.mark.redis
def test_one_row_scopes_of_every_kind_evicted_in_bulk_on_redis(
    redis_server: RedisServer,
) -> None:
    from mcp_cancellation.storage.redis import RedisStorage

    storage = RedisStorage.from_url(redis_server.url, prefix=f"mixed-{uuid.uuid4().hex[:10]}")
    _mixed_flood(storage, [1_000.0], expiry=False)
