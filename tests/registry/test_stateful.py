"""A hypothesis state machine drives random cancel / cancel_in_flight / clear / request /
abandoned-track / cleanup sequences against a plain reference model of the seed's rules
(an O(rows) eviction exactly as the seed states it), and checks after every step that the
registry agrees with the model and that the invariants hold: no scope over its quota, the
table never over its cap, and a caller under quota never rejected."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from mcp_cancellation import (
    CancellationLimitReached,
    CancellationRegistry,
    CleanupResult,
    MemoryStorage,
    RequestToken,
)
from mcp_cancellation.scope import scope_kind
from mcp_cancellation.storage import Storage

from ..support import RedisServer
from ._model import Model

T = TypeVar("T")

# Every scope kind appears, so the totals by kind are checked too.
SCOPES = [f"s{n}" for n in range(20)] + ["global", "ip:192.0.2.1", "session:a", "principal:p"]
IDS = list(range(6))
scopes = st.sampled_from(SCOPES)
ids = st.sampled_from(IDS)
reasons = st.one_of(st.none(), st.sampled_from(["a", "b", "stop"]))


@dataclass
class _Live:
    """A request in flight in its own task, held open until finished."""

    scope: str
    key: str
    task: asyncio.Task[None]
    release: asyncio.Event
    token: RequestToken
    expect_cancelled: bool


class RegistryMachine(RuleBasedStateMachine):
    """Drives one registry and one model in lockstep."""

    storage_factory: Callable[[Callable[[], float]], Storage] = staticmethod(
        lambda clock: MemoryStorage(clock=clock)
    )
    controlled_clock = True

    live = Bundle("live")

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.now = 1_000.0
        self.registry: CancellationRegistry | None = None
        self.model = Model(None, None)
        self.open: list[_Live] = []
        # Rows recorded while nothing of theirs was in flight: the next request claims one.
        # Every other row is bound to the requests in flight when it was recorded.
        self.pending: set[tuple[str, str]] = set()

    def run(self, coro: Awaitable[T]) -> T:
        return self.loop.run_until_complete(coro)

    @property
    def reg(self) -> CancellationRegistry:
        assert self.registry is not None
        return self.registry

    @initialize(
        max_rows=st.sampled_from([None, 1, 4, 10, 20, 40, 60]),
        quota=st.sampled_from([None, 1, 2, 3, 5]),
    )
    def setup(self, max_rows: int | None, quota: int | None) -> None:
        storage = self.storage_factory(lambda: self.now)
        self.registry = CancellationRegistry(
            storage,
            max_rows=max_rows,
            max_rows_per_scope=quota,
            ttl=None,
            janitor_interval=None,
            # (The model has no waiting cancellations: a request of an id not in flight is
            # withdrawn at once. tests/registry/test_waiting_cancellations.py has the wait.)
            track_wait=0.0,
        )
        self.model = Model(max_rows, quota)

    def tick(self) -> float:
        # Every write happens at a distinct instant, so rows have distinct ages.
        self.now += 1.0
        return self.now

    def flip(self, scope: str, key: str) -> None:
        for live in self.open:
            if (live.scope, live.key) == (scope, key):
                live.expect_cancelled = True

    def tracked(self, scope: str, key: str) -> bool:
        if self.model.dead.get((scope, key)):
            return True
        return any((live.scope, live.key) == (scope, key) for live in self.open)

    # -- rules --------------------------------------------------------------------------

    def _cancel(self, scope: str, request_id: int, reason: str | None) -> None:
        key = str(request_id)
        before = self.model.counts().get(scope, 0)
        accepted = self.model.add(scope, key, reason, self.tick())
        if accepted:
            self.run(self.reg.cancel(request_id, reason, scope=scope))
            self.flip(scope, key)
            if self.tracked(scope, key):
                self.pending.discard((scope, key))
            else:
                self.pending.add((scope, key))
        else:
            assert self.model.quota is not None
            assert before >= self.model.quota
            with pytest.raises(CancellationLimitReached):
                self.run(self.reg.cancel(request_id, reason, scope=scope))

    @rule(scope=scopes, request_id=ids, reason=reasons)
    def cancel(self, scope: str, request_id: int, reason: str | None) -> None:
        self._cancel(scope, request_id, reason)

    @rule(batch=st.lists(st.tuples(scopes, ids), min_size=1, max_size=12))
    def cancel_many(self, batch: list[tuple[str, int]]) -> None:
        for scope, request_id in batch:
            self._cancel(scope, request_id, "many")

    @rule(scope=scopes, request_id=ids, reason=reasons)
    def cancel_in_flight(self, scope: str, request_id: int, reason: str | None) -> None:
        key = str(request_id)
        if not self.tracked(scope, key):
            # It waits for a track (none comes): counted against the quota while it does.
            quota = self.model.quota
            if quota is not None and len(self.model.rows.get(scope, {})) >= quota:
                with pytest.raises(CancellationLimitReached):
                    self.run(self.reg.cancel_in_flight(request_id, reason, scope=scope))
                return
            assert not self.run(self.reg.cancel_in_flight(request_id, reason, scope=scope))
            return
        if self.model.add(scope, key, reason, self.tick()):
            assert self.run(self.reg.cancel_in_flight(request_id, reason, scope=scope))
            self.flip(scope, key)
            self.pending.discard((scope, key))
        else:
            with pytest.raises(CancellationLimitReached):
                self.run(self.reg.cancel_in_flight(request_id, reason, scope=scope))

    @rule(scope=scopes, request_id=ids)
    def clear(self, scope: str, request_id: int) -> None:
        self.model.remove(scope, str(request_id))
        self.run(self.reg.clear(request_id, scope=scope))

    @precondition(lambda self: len(self.open) < 6)
    @rule(target=live, scope=scopes, request_id=ids)
    def start_request(self, scope: str, request_id: int) -> _Live:
        entered, release = asyncio.Event(), asyncio.Event()
        tokens: list[RequestToken] = []

        async def serve() -> None:
            async with self.reg.request(request_id, scope=scope) as token:
                tokens.append(token)
                entered.set()
                await release.wait()

        task = self.loop.create_task(serve())
        self.run(entered.wait())
        key = str(request_id)
        live = _Live(scope, key, task, release, tokens[0], self._claim(scope, key))
        self.open.append(live)
        return live

    def _claim(self, scope: str, key: str) -> bool:
        """A request starts: whether it claims a pending row (and starts cancelled)."""
        claimed = (scope, key) in self.pending and key in self.model.rows.get(scope, {})
        self.pending.discard((scope, key))
        return claimed

    @rule(live=consumes(live))
    def finish_request(self, live: _Live) -> None:
        live.release.set()
        self.run(live.task)
        self.open.remove(live)
        self.model.remove(live.scope, live.key)  # leaving request() clears the row

    @rule(scope=scopes, request_id=ids)
    def abandon(self, scope: str, request_id: int) -> None:
        # A task that tracks and ends without untracking: a dead owner until cleanup.
        async def track() -> None:
            await self.reg.track(request_id, scope=scope)

        self.run(self.loop.create_task(track()))
        pair = (scope, str(request_id))
        self._claim(*pair)
        self.model.dead[pair] = self.model.dead.get(pair, 0) + 1

    @rule(dt=st.sampled_from([0.5, 3.0, 20.0]))
    def advance(self, dt: float) -> None:
        if self.controlled_clock:
            self.now += dt

    @rule(ttl=st.one_of(st.none(), st.sampled_from([2.5, 10.0, 50.0])))
    def cleanup(self, ttl: float | None) -> None:
        if not self.controlled_clock:
            ttl = None
        # A dead owner's cancellation row goes with it, unless a live request with that id
        # is still in flight; then the TTL expires what is left.
        for scope, key in self.model.dead:
            if not any((live.scope, live.key) == (scope, key) for live in self.open):
                self.model.remove(scope, key)
        removed = 0 if ttl is None else self.model.expire(ttl, self.now)
        dead = sum(self.model.dead.values())
        self.model.dead.clear()
        result = self.run(self.reg.cleanup(ttl=ttl))
        assert result == CleanupResult(removed, dead)

    # -- invariants ---------------------------------------------------------------------

    @invariant()
    def agrees_with_the_model(self) -> None:
        if self.registry is None:
            return
        stats = self.run(self.reg.stats())
        counts = {scope: n for scope, n in stats.rows.items() if n}
        assert counts == self.model.counts()
        if self.model.quota is not None:
            assert all(n <= self.model.quota for n in counts.values())
        if self.model.max_rows is not None:
            assert sum(counts.values()) <= self.model.max_rows
        expected_in_flight: dict[str, int] = {}
        for (scope, _), n in self.model.dead.items():
            expected_in_flight[scope] = expected_in_flight.get(scope, 0) + n
        for live in self.open:
            expected_in_flight[live.scope] = expected_in_flight.get(live.scope, 0) + 1
        assert {s: n for s, n in stats.in_flight.items() if n} == expected_in_flight
        for live in self.open:
            assert live.token.cancelled == live.expect_cancelled

    @invariant()
    def the_index_agrees_with_the_table(self) -> None:
        """What a scrape reads (the storage's scope-size index and kind totals) is the
        table as the model has it: the largest scopes in eviction order, any prefix."""
        if self.registry is None:
            return
        order = self.model.eviction_order()
        for top_k in (1, 3, len(SCOPES)):
            summary = self.run(self.reg.storage.summary(top_k))
            assert list(summary.largest) == order[:top_k]
        kinds: dict[str, int] = {}
        for scope, n in order:
            kinds[scope_kind(scope)] = kinds.get(scope_kind(scope), 0) + n
        assert {kind: n for kind, n in summary.rows.items() if n} == kinds
        if isinstance(self.reg.storage, MemoryStorage):
            self.reg.storage.check_index()

    @invariant()
    def rows_and_reasons_match(self) -> None:
        if self.registry is None:
            return

        # Every scope the model or the storage knows of (the others are checked empty by
        # agrees_with_the_model), every id.
        stats = self.run(self.reg.stats())
        known = sorted(set(self.model.rows) | set(stats.rows))

        async def read() -> dict[tuple[str, str], str | None]:
            found: dict[tuple[str, str], str | None] = {}
            for scope in known:
                for request_id in IDS:
                    if await self.reg.is_cancelled(request_id, scope=scope):
                        found[(scope, str(request_id))] = await self.reg.reason(
                            request_id, scope=scope
                        )
            return found

        expected = {
            (scope, key): reason
            for scope, rows in self.model.rows.items()
            for key, (_, reason) in rows.items()
        }
        assert self.run(read()) == expected

    def teardown(self) -> None:
        for live in self.open:
            live.release.set()
        if self.open:
            self.run(asyncio.gather(*(live.task for live in self.open)))
        if self.registry is not None:
            self.run(self.registry.aclose())
        self.loop.close()


def _runs(examples: int, steps: int) -> settings:
    """Hypothesis settings of a run: no deadline (servers and threads take their time)."""
    return settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )


def test_registry_matches_the_reference_model() -> None:
    run_state_machine_as_test(RegistryMachine, settings=_runs(examples=60, steps=40))


@pytest.mark.redis
@pytest.mark.slow  # (hundreds of generated steps on Redis)
def test_registry_matches_the_reference_model_on_redis(redis_server: RedisServer) -> None:
    """The same machine on a real redis-server: fewer examples (every step is network
    round trips), and no TTL expiry since Redis ages come from the server's clock."""

    def redis_storage(clock: Callable[[], float]) -> Storage:
        from mcp_cancellation.storage.redis import RedisStorage

        # (Every call tracked at its start: the model counts calls in flight at once.)
        prefix = f"stateful-{uuid.uuid4().hex[:10]}"
        return RedisStorage.from_url(redis_server.url, prefix=prefix, track_delay=0)

    class OnRedis(RegistryMachine):
        storage_factory = staticmethod(redis_storage)
        controlled_clock = False

    run_state_machine_as_test(OnRedis, settings=_runs(examples=25, steps=30))
