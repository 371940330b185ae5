"""The per-scope quota rejects; the global cap evicts a full batch, largest scope first,
oldest first, spilling into the next largest, and never rejects a caller under quota."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from mcp_cancellation import CancellationLimitReached, CancellationRegistry
from mcp_cancellation.signals import cancellation_evicted, cancellation_rejected
from mcp_cancellation.storage._base import Limits

from ..support import MakeRegistry, one_table
from ._util import receiving, rows


async def _fill(registry: CancellationRegistry, scope: str, ids: range) -> None:
    for request_id in ids:
        await registry.cancel(request_id, scope=scope)


async def _present(registry: CancellationRegistry, scope: str, ids: range) -> list[int]:
    return [i for i in ids if await registry.is_cancelled(i, scope=scope)]


Capped = Callable[[int, dict[str, int]], Awaitable[CancellationRegistry]]


@pytest.fixture
def capped(make_registry: MakeRegistry) -> Capped:
    """Makes a registry capped at *max_rows* rows, with no quota, whose scopes hold
    ``filled[scope]`` rows each (ids from 0), recorded in that order."""

    async def make(max_rows: int, filled: dict[str, int]) -> CancellationRegistry:
        registry = make_registry(max_rows=max_rows, max_rows_per_scope=None)
        for scope, count in filled.items():
            await _fill(registry, scope, range(count))
        return registry

    return make


def test_defaults() -> None:
    registry = CancellationRegistry(janitor_interval=None)
    assert registry.max_rows == 10_000
    assert registry.max_rows_per_scope == 256
    assert registry.limits == Limits(max_rows=10_000, max_rows_per_scope=256)


@pytest.mark.parametrize(
    ("max_rows", "batch"),
    [(1, 1), (10, 1), (19, 1), (20, 1), (39, 1), (40, 2), (100, 5), (10_000, 500), (None, 1)],
)
def test_eviction_batch_is_a_twentieth_of_the_cap(max_rows: int | None, batch: int) -> None:
    assert Limits(max_rows=max_rows).eviction_batch == batch


# -- quota ------------------------------------------------------------------------------


async def test_quota_rejects_a_new_row_in_a_full_scope(make_registry: MakeRegistry) -> None:
    registry = make_registry(max_rows_per_scope=3)
    await _fill(registry, "s", range(3))
    with (
        receiving(cancellation_rejected) as rejected,
        pytest.raises(CancellationLimitReached) as info,
    ):
        await registry.cancel(3, scope="s")
    assert info.value.scope == "s"
    assert info.value.limit == 3
    assert rejected.kwargs == [
        {"scope": "s", "request_id": "3", "reason": "quota", "mode": "enforce"}
    ]
    assert not await registry.is_cancelled(3, scope="s")
    assert await rows(registry) == {"s": 3}
    # Other scopes have their own quota.
    await _fill(registry, "t", range(3))
    assert await rows(registry) == {"s": 3, "t": 3}


async def test_quota_never_refuses_an_update_of_an_existing_row(
    make_registry: MakeRegistry,
) -> None:
    registry = make_registry(max_rows_per_scope=2)
    await _fill(registry, "s", range(2))
    await registry.cancel(1, "again", scope="s")
    assert await registry.reason(1, scope="s") == "again"


async def test_quota_frees_up_when_a_row_is_cleared(make_registry: MakeRegistry) -> None:
    registry = make_registry(max_rows_per_scope=2)
    await _fill(registry, "s", range(2))
    await registry.clear(0, scope="s")
    await registry.cancel(5, scope="s")
    assert await _present(registry, "s", range(6)) == [1, 5]


@one_table
async def test_quota_is_checked_before_the_cap(make_registry: MakeRegistry) -> None:
    # The table is at its cap and scope "a" at its quota: "a" is refused, and the cap
    # evicts nothing on its behalf (it would otherwise have made room by evicting).
    registry = make_registry(max_rows=4, max_rows_per_scope=2)
    await _fill(registry, "a", range(2))
    await _fill(registry, "b", range(2))
    with receiving(cancellation_evicted) as evicted, pytest.raises(CancellationLimitReached):
        await registry.cancel(9, scope="a")
    assert evicted.calls == []
    assert await rows(registry) == {"a": 2, "b": 2}
    assert await _present(registry, "b", range(2)) == [0, 1]


async def test_cancel_in_flight_is_subject_to_the_quota(make_registry: MakeRegistry) -> None:
    registry = make_registry(max_rows_per_scope=1)
    await registry.cancel(0, scope="s")
    token = await registry.track(1, scope="s")
    with pytest.raises(CancellationLimitReached):
        await registry.cancel_in_flight(1, scope="s")
    assert not token.cancelled
    await registry.untrack(1, scope="s")


# -- cap --------------------------------------------------------------------------------


@one_table
async def test_cap_evicts_the_largest_scope_not_the_caller_or_a_bystander(capped: Capped) -> None:
    registry = await capped(40, {"big": 30, "bystander": 9})  # batch of 2
    await registry.cancel(0, scope="caller")
    assert await rows(registry) == {"big": 30, "bystander": 9, "caller": 1}

    with receiving(cancellation_evicted) as evicted:
        await registry.cancel(1, scope="caller")
    assert evicted.kwargs == [{"scope": "big", "count": 2}]
    assert await rows(registry) == {"big": 28, "bystander": 9, "caller": 2}
    # Oldest first within the evicted scope.
    assert await _present(registry, "big", range(30)) == list(range(2, 30))
    assert await _present(registry, "bystander", range(9)) == list(range(9))
    assert await _present(registry, "caller", range(2)) == [0, 1]


@one_table
async def test_cap_evicts_the_callers_own_scope_when_it_is_the_largest(capped: Capped) -> None:
    registry = await capped(20, {"caller": 15, "other": 5})  # batch of 1
    await registry.cancel(99, scope="caller")
    assert await rows(registry) == {"caller": 15, "other": 5}
    assert await _present(registry, "caller", range(15)) == list(range(1, 15))
    assert await registry.is_cancelled(99, scope="caller")


@one_table
async def test_cap_spills_into_the_next_largest_scope(capped: Capped) -> None:
    registry = await capped(100, {"second": 3, "largest": 4})  # batch of 5
    for n in range(93):
        await registry.cancel(0, scope=f"single-{n}")
    assert sum((await rows(registry)).values()) == 100

    with receiving(cancellation_evicted) as evicted:
        await registry.cancel(0, scope="caller")
    # All 4 rows of the largest scope, then the oldest 1 of the next largest.
    assert evicted.kwargs == [{"scope": "largest", "count": 4}, {"scope": "second", "count": 1}]
    counts = await rows(registry)
    assert "largest" not in counts
    assert counts["second"] == 2
    assert await _present(registry, "second", range(3)) == [1, 2]
    assert all(counts[f"single-{n}"] == 1 for n in range(93))
    assert counts["caller"] == 1
    assert sum(counts.values()) == 96


@one_table
async def test_full_batch_when_every_scope_holds_one_row(make_registry: MakeRegistry) -> None:
    registry = make_registry(max_rows=40, max_rows_per_scope=None)  # batch of 2
    for n in range(40):
        await registry.cancel(1, scope=f"s{n:02}")
    with receiving(cancellation_evicted) as evicted:
        await registry.cancel(1, scope="caller")
    # All scopes tie: the batch is still full, and takes the oldest rows.
    assert sum(kwargs["count"] for kwargs in evicted.kwargs) == 2
    assert [kwargs["scope"] for kwargs in evicted.kwargs] == ["s00", "s01"]
    counts = await rows(registry)
    assert sum(counts.values()) == 39
    assert "s00" not in counts
    assert "s01" not in counts
    assert counts["caller"] == 1


@one_table
async def test_full_batch_when_a_single_scope_holds_the_table(capped: Capped) -> None:
    registry = await capped(60, {"only": 60})  # batch of 3
    await registry.cancel(60, scope="only")
    assert await rows(registry) == {"only": 58}
    assert await _present(registry, "only", range(61)) == list(range(3, 61))


@one_table
async def test_updating_a_row_at_the_cap_evicts_nothing(capped: Capped) -> None:
    registry = await capped(20, {"s": 20})
    with receiving(cancellation_evicted) as evicted:
        await registry.cancel(0, "new reason", scope="s")
    assert evicted.calls == []
    assert await rows(registry) == {"s": 20}


async def test_none_disables_both_limits(make_registry: MakeRegistry) -> None:
    registry = make_registry(max_rows=None, max_rows_per_scope=None)
    assert registry.max_rows is None
    assert registry.max_rows_per_scope is None
    with receiving(cancellation_evicted) as evicted:
        await _fill(registry, "one", range(1_500))
        for n in range(30):
            await _fill(registry, f"s{n}", range(20))
    assert evicted.calls == []
    counts = await rows(registry)
    assert counts["one"] == 1_500
    assert sum(counts.values()) == 2_100


async def test_none_disables_only_the_cap(make_registry: MakeRegistry) -> None:
    registry = make_registry(max_rows=None, max_rows_per_scope=5)
    for n in range(300):
        await _fill(registry, f"s{n}", range(5))
    with pytest.raises(CancellationLimitReached):
        await registry.cancel(5, scope="s0")
    assert sum((await rows(registry)).values()) == 1_500


async def test_none_disables_only_the_quota(capped: Capped) -> None:
    registry = await capped(100, {"s": 1_000})
    counts = await rows(registry)
    assert 0 < counts["s"] <= 100


async def test_40_scopes_of_256_over_a_10000_cap_all_keep_inserting(
    make_registry: MakeRegistry,
) -> None:
    registry = make_registry()  # defaults: cap 10 000, quota 256, batch 500
    scopes = [f"ip:198.51.100.{n}" for n in range(40)]
    evicted_total = 0
    inserted = 0

    def count(sender: object, **kwargs: object) -> None:
        nonlocal evicted_total
        assert isinstance(kwargs["count"], int)
        evicted_total += kwargs["count"]

    with cancellation_evicted.connected_to(count):
        # 40 busy clients at once, one cancellation each per round: every insert must
        # succeed, since each scope stays under its own quota; the cap evicts instead.
        for request_id in range(256):
            await asyncio.gather(*(registry.cancel(request_id, scope=s) for s in scopes))
            inserted += len(scopes)
            assert inserted - evicted_total <= 10_000
    counts = await rows(registry)
    assert sum(counts.values()) == inserted - evicted_total <= 10_000
    assert evicted_total > 0
    assert max(counts.values()) <= 256
    # Afterwards the rule still holds scope by scope: under quota inserts, at quota is
    # refused and nothing else.
    for scope in scopes:
        held = counts.get(scope, 0)
        if held < 256:
            await registry.cancel("one more", scope=scope)
        else:
            with pytest.raises(CancellationLimitReached):
                await registry.cancel("one more", scope=scope)
    assert sum((await rows(registry)).values()) <= 10_000


@pytest.mark.slow  # (40 scopes filled one by one)
async def test_40_scopes_filled_one_after_another_are_never_refused(
    make_registry: MakeRegistry,
) -> None:
    registry = make_registry()
    for n in range(40):
        scope = f"session:{n}"
        for request_id in range(256):
            await registry.cancel(request_id, scope=scope)
        # The scope just filled is the newest: eviction took older scopes' rows.
        assert (await rows(registry))[scope] == 256
    assert sum((await rows(registry)).values()) <= 10_000


@one_table
async def test_a_flood_of_one_row_scopes_is_evicted_oldest_first(capped: Capped) -> None:
    """The address-rotation shape: thousands of scopes holding one row each, behind a few
    larger ones. One evicting insert takes the larger scopes first, then the oldest
    one-row scopes, in order, on every backend (Redis drops those in bulk)."""
    registry = await capped(2_400, {"principal:big": 30, "principal:mid": 10})  # batch of 120
    for i in range(2_360):
        await registry.cancel(1, None, f"ip:10.0.{i >> 8}.{i & 255}")
    with receiving(cancellation_evicted) as evicted:
        await registry.cancel(1, None, "ip:203.0.113.1")
    expected = [("principal:big", 30), ("principal:mid", 10)]
    expected += [(f"ip:10.0.{i >> 8}.{i & 255}", 1) for i in range(80)]
    assert [(e["scope"], e["count"]) for e in evicted.kwargs] == expected
    stats = await registry.stats()
    assert stats.total_rows == 2_400 - 120 + 1
    assert "ip:10.0.0.79" not in stats.rows
    assert stats.rows["ip:10.0.0.80"] == 1
    assert not await registry.is_cancelled(1, "ip:10.0.0.0")
    assert await registry.is_cancelled(1, "ip:10.0.0.80")
    # The next evicting insert continues with the next oldest.
    await _fill(registry, "ip:203.0.113.1", range(2, 2 + 119))
    with receiving(cancellation_evicted) as evicted:
        await registry.cancel(1, None, "ip:203.0.113.2")
    assert evicted.kwargs[0] == {"scope": "ip:203.0.113.1", "count": 120}


@one_table
@pytest.mark.parametrize("size", [2, 3])
async def test_a_flood_of_small_scopes_is_evicted_in_order(
    make_registry: MakeRegistry, size: int
) -> None:
    """Many scopes of a few rows each (a few cancellations per rotated address), filled
    round-robin so their oldest rows interleave: one evicting insert takes whole scopes in
    order of their oldest row, and the batch ends part-way into the next one, its oldest
    rows first, on every backend (Redis drops the whole scopes in bulk)."""
    scopes = [f"ip:10.1.{i >> 8}.{i & 255}" for i in range(2_400 // size)]
    registry = make_registry(max_rows=2_400, max_rows_per_scope=None)  # batch of 120
    for request_id in range(size):
        for scope in scopes:
            await registry.cancel(request_id, None, scope)
    with receiving(cancellation_evicted) as evicted:
        await registry.cancel(1, None, "ip:203.0.113.1")
    whole, part = divmod(120, size)
    expected = [(scope, size) for scope in scopes[:whole]]
    if part:
        expected.append((scopes[whole], part))
    assert [(e["scope"], e["count"]) for e in evicted.kwargs] == expected
    stats = await registry.stats()
    assert stats.total_rows == 2_400 - 120 + 1
    assert scopes[whole - 1] not in stats.rows
    if part:
        assert stats.rows[scopes[whole]] == size - part
        # Its oldest rows went: those with the lowest ids (inserted first).
        assert await _present(registry, scopes[whole], range(size)) == list(range(part, size))
    assert stats.rows[scopes[whole + 1]] == size
