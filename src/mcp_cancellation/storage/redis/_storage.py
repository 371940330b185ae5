"""``RedisStorage``: the registry's operations on the shared table, one script each.

The package docstring (:mod:`mcp_cancellation.storage.redis`) describes the design; the
key layout and the scripts are in :mod:`._scripts`, the background push in :mod:`._push`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import uuid
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from ..._errors import ConfigurationError, StorageUnavailable
from ..._extras import requires
from ..._printable import printable
from ..._token import OPERATOR
from .._base import AddResult, InFlightRequest, Limits, Storage, StorageStats, TableSummary
from .._health import Health
from ._cluster import ShardSubscription, is_cluster
from ._codec import decode_reason, member, split_member, text
from ._connect import cluster_concurrency, connect, table_identity
from ._contracts import (
    AddCall,
    AddReply,
    BeatCall,
    CleanupCall,
    CleanupReply,
    RemoveCall,
    SummaryCall,
    WithdrawCall,
)
from ._home import HomeLoop
from ._journal import Journal
from ._layout import check_layout
from ._liveness import Liveness, twin_recipe
from ._operator_view import read_in_flight
from ._push import ChannelSubscription, Push, Subscription, announce_refusal
from ._scripts import Scripts, source
from ._table import Keys, Table, table_prefix
from ._tasks import RedisTaskTable

with requires("redis", "RedisStorage"):
    from redis.asyncio import Redis
    from redis.asyncio.cluster import RedisCluster

if TYPE_CHECKING:
    from ..._token import RequestToken

__all__ = ["DEFAULT_PREFIX", "RedisStorage"]

logger = logging.getLogger("mcp_cancellation.redis")

DEFAULT_PREFIX = "mcp-cancellation"
#: Rows one ``ADD`` script may evict: a few milliseconds of Redis time at worst (one-row
#: scopes, the costliest shape; docs/performance.md).
DEFAULT_EVICTION_CHUNK = 250
#: Expired rows one ``CLEANUP`` script may remove: a few milliseconds of Redis time at
#: worst (scopes that each lose their oldest row, the costliest shape; docs/performance.md).
DEFAULT_CLEANUP_BATCH = 500
#: The longest a request waits for Redis as it starts and as it ends (seconds).
DEFAULT_MAX_WAIT = 0.25
#: How long a call runs before it is tracked in Redis (seconds): most calls end sooner,
#: and cost Redis nothing. A cancellation that finds a call young seeks it (its track
#: goes at once); should the seek be lost, this timer's track still lands within the
#: registry's default ``track_wait`` (0.5 s) with the owner's loop busy for up to 0.3 s
#: (docs/architecture.md, "The Redis table", says why 0.2 s).
DEFAULT_TRACK_DELAY = 0.2
#: How long a waiting cancellation that no track claimed (answered 202) is kept as a
#: *lapsed* cancellation (seconds: a cancellation row's default TTL): a call whose
#: worker's loop was blocked meanwhile, tracked late, is cancelled by it if it started
#: before it lapsed (docs/architecture.md, "The Redis table").
LAPSE = 300.0
#: The most lapsed cancellations one scope keeps (the oldest go first) when it has no
#: quota; with one, the quota.
LAPSES_KEPT = 256
#: How long a waiting cancellation outlives its wait when its waiter cannot withdraw it
#: (the waiter died, or Redis stalled): a later request of its id is safe past that.
WAIT_MARGIN = 1.0
T = TypeVar("T")


class RedisStorage(Storage):
    """Rows in Redis, shared by every worker and node that uses the same prefix.

    *client* is a ``redis.asyncio.Redis``, or a ``RedisCluster`` (sharded pub/sub, Redis
    >= 7; calls past its pool's size wait for a free connection here, since the cluster
    pool refuses a burst); :meth:`from_url` builds either with sensible bounds, and the
    storage closes a client it built (close your own). *timeout* caps every call,
    retries included; a request waits for Redis at most *max_wait* as it starts or ends
    (past it, its track reaches Redis when Redis answers, retried with
    *reconnect_backoff*). A call is tracked in Redis only once it has run *track_delay*
    seconds (0: at its start), or at once when a cancellation seeks it, so that a
    shorter call costs Redis nothing (docs/architecture.md, "young calls").
    *heartbeat_ttl* is how long a silent worker keeps its rows;
    *identity* names the table in metrics (default: see :attr:`identity`);
    *eviction_chunk* and *cleanup_batch* bound the rows one script evicts or expires, so
    that no script holds Redis for more than a few milliseconds: lower them when other
    traffic on the same Redis cannot wait that long.
    docs/deployment.md, sections 7 and 8, says more of each. An *operator* storage (the
    ``inspect`` and ``cancel`` commands) reads and cancels but never joins the table's
    workers: no listener, no heartbeat, and it tracks no request.
    """

    name = "redis"

    def __init__(
        self,
        client: Redis | RedisCluster,
        *,
        prefix: str = DEFAULT_PREFIX,
        timeout: float = 5.0,
        heartbeat_ttl: float = 8.0,
        cleanup_batch: int = DEFAULT_CLEANUP_BATCH,
        reconnect_backoff: tuple[float, float] = (0.05, 2.0),
        identity: str | None = None,
        eviction_chunk: int | None = DEFAULT_EVICTION_CHUNK,
        max_wait: float = DEFAULT_MAX_WAIT,
        track_delay: float = DEFAULT_TRACK_DELAY,
        operator: bool = False,
    ) -> None:
        if not prefix or "{" in prefix or "}" in prefix:
            raise ConfigurationError("prefix must be non-empty and contain no '{' or '}'")
        if timeout <= 0 or heartbeat_ttl <= 0 or cleanup_batch < 1 or max_wait < 0:
            raise ConfigurationError(
                "timeout, heartbeat_ttl and cleanup_batch must be > 0, max_wait >= 0"
            )
        if not 0 <= track_delay < 60:
            raise ConfigurationError("track_delay must be >= 0 and < 60 seconds")
        if eviction_chunk is not None and eviction_chunk < 1:
            raise ConfigurationError("eviction_chunk must be >= 1 or None")
        self._eviction_chunk = eviction_chunk
        self.operator = operator
        self._redis = client
        self.prefix = prefix
        self._identity = identity if identity is not None else table_identity(client, prefix)
        keys = Keys(table_prefix(prefix))
        self._prefix = keys.prefix
        self.timeout = timeout
        self.heartbeat_ttl = heartbeat_ttl
        #: The heartbeat TTL as every script takes it (ms).
        self._heartbeat_ms = str(max(1, int(heartbeat_ttl * 1000)))
        self._cleanup_batch = cleanup_batch
        self._close_client = False  # from_url's own client: closed by aclose()
        self._bound = False
        self._used = False  # once a call was made, the worker id is fixed
        self.cluster = is_cluster(client)
        scripts = Scripts(client, keys.scopes, sharded=self.cluster)
        self._health = Health(self, "Redis")
        subscription: Subscription
        concurrency: int | None = None  # a blocking pool queues a burst by itself
        prepare = None
        if isinstance(client, RedisCluster):
            subscription = ShardSubscription(client, keys.scopes)
            concurrency = cluster_concurrency(client)  # its pool refuses a burst: queue it
            prepare = client.initialize  # its slot map first (see _cluster.py)
        else:
            subscription = ChannelSubscription(client)
        self._home = HomeLoop(timeout, self._on_call, self._health, concurrency, prepare)
        self._table = Table(client, keys, self._home, scripts)
        self._tasks = RedisTaskTable(self._table, self._heartbeat_ms)
        # For this long after a worker saw Redis fail (or found the table lost), Redis
        # refuses cancellations of ids it does not see in flight (503, never a 202 that
        # does nothing): a worker may not have re-sent its tracks yet. Long enough for
        # every worker's retry, whose backoff waits at most reconnect_backoff[1].
        self._grace = max(1.0, 2 * reconnect_backoff[1])
        self._journal = Journal(
            table=self._table,
            heartbeat_ms=self._heartbeat_ms,
            # Past a loss or an outage, cancellations of ids not in flight are refused
            # until every worker has had its retry (the backoff's longest wait) twice.
            grace=self._grace,
            announce_refusal=functools.partial(
                announce_refusal, client, keys.resyncs, self.cluster, timeout
            ),
            wait=max_wait,
            backoff=reconnect_backoff,
            resynced=self._tasks.resynced,
            delay=track_delay,
        )
        self._journal.worker = uuid.uuid4().hex[:12]
        self._push = Push(
            subscription=subscription,
            home=self._home,
            keys=keys,
            journal=self._journal,
            heartbeat_ttl=heartbeat_ttl,
            backoff=reconnect_backoff,
            answered=self._tasks.pushed,
            resubscribed=self._tasks.wakeups.wake_all,
            hearing_seeks=self._hearing_seeks,
        )
        self._liveness: Liveness | None = None
        self._reloading: asyncio.Task[None] | None = None

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Self:
        """Connect to ``redis://`` / ``rediss://`` / ``unix://`` *url*, or to a Redis
        Cluster: ``redis+cluster://[user:pass@]host:port[,host:port...]`` (``rediss+cluster``
        for TLS), or any ``redis://`` URL with ``cluster=True``. Every node listed in a
        cluster URL is a startup node.

        *options* are the constructor's, plus the client's: each command waits at most
        ``socket_timeout`` (2 s; ``connect_timeout`` to connect) and is retried
        ``retries`` (1) times at once (which also heals a pooled connection that the
        server closed); *timeout* caps the whole call, including the wait for one of the
        pool's ``max_connections`` (50, plus the pub/sub connection). On a cluster a
        command is retried with a short backoff until *timeout* instead, so one issued
        during a failover succeeds once a replica has taken over. Any other keyword goes
        to ``redis.asyncio.BlockingConnectionPool.from_url`` (to ``RedisCluster`` on a
        cluster). The client is closed by :meth:`aclose`.
        """
        client, storage_options = connect(url, options)
        storage = cls(client, **storage_options)
        storage._close_client = True
        return storage

    # -- identity and plumbing -----------------------------------------------------------

    @property
    def client(self) -> Redis | RedisCluster:
        """The underlying ``redis.asyncio`` client (a ``RedisCluster`` on a cluster)."""
        return self._redis

    @property
    def identity(self) -> str:
        """The shared table: ``redis://<host>:<port>/<db>?prefix=<prefix>`` (or
        ``unix://<path>?db=<db>&prefix=<prefix>``), the same in every process that uses
        this server, database and prefix. Never contains a user name or password. Pass
        ``identity=`` when processes reach one server under different addresses."""
        return self._identity

    @property
    def available(self) -> bool:
        """Whether Redis took this storage's last write (reads alone do not end an
        outage: Redis may allow them and refuse writes)."""
        return self._health.available

    @property
    def track_delay(self) -> float:
        """Seconds a call runs before it is tracked in Redis (see the class docstring)."""
        return self._journal.delay

    @property
    def table(self) -> Table:
        """This storage's table: its keys, home loop and scripts (for the partitioned
        storage and the operator tools, which run their calls on the same loop)."""
        return self._table

    @property
    def keeps_young_calls(self) -> bool:
        """Whether a call that starts now stays young (untracked until ``track_delay``):
        only while the listener hears the seeks, and has read the pending rows."""
        return self._journal.hearing

    @property
    def task_table(self) -> RedisTaskTable:
        """The tasks in this table (see :mod:`mcp_cancellation.tasks`)."""
        return self._tasks

    @property
    def worker_id(self) -> str:
        """This worker's id in Redis (the registry's instance id once bound)."""
        return self._journal.worker

    @property
    def subscribed(self) -> bool:
        """Whether the listener currently holds a live subscription (for health checks)."""
        return self._push.subscribed

    @property
    def partition(self) -> tuple[int, int]:
        """``(index, partitions)`` of this table in a partitioned one (``(0, 1)`` for a
        whole table), kept in the table for the operator tools (``P layout``)."""
        index, _, count = self._journal.layout.partition("/")
        return int(index), int(count)

    @partition.setter
    def partition(self, value: tuple[int, int]) -> None:
        self._journal.layout = f"{value[0]}/{value[1]}"

    def bind(self, instance_id: str) -> None:
        """Name this worker after the registry's instance id (first registry wins)."""
        if not self._bound and not self._used:
            self._journal.worker = instance_id
        self._bound = True

    def key(self, *parts: str) -> bytes:
        """A full key name under this storage's prefix (for tests and operators)."""
        return self._table.keys.key(*parts)

    def __repr__(self) -> str:
        return f"<RedisStorage prefix={self.prefix!r} worker={self.worker_id!r}>"

    def _on_call(self) -> None:
        """Before each call, on the home loop: the worker id is fixed from now on, and the
        background tasks (listener, heartbeat) run, except on an operator's storage."""
        self._used = True
        if not (self._push.started or self._home.closed or self.operator):
            self._push.start()
            self._start_liveness()

    def _start_liveness(self) -> None:
        """Beat from a process of its own (see :mod:`._liveness`)."""
        keys = self._table.keys
        self._liveness = Liveness(
            twin_recipe(self._redis),
            source("BEAT"),
            [keys.scopes],
            BeatCall(self.worker_id, self._heartbeat_ms).argv(keys.prefix),
            self.heartbeat_ttl / 4,
            min(self.timeout, 2.0),
            functools.partial(self._home.soon, self._journal.want_resync),
        )
        self._liveness.start(f"mcp-cancellation-heartbeat-{self.worker_id}")

    async def _run(self, name: str, argv: Sequence[bytes | str], operation: str = "") -> Any:
        """One script (:meth:`Table.run`)."""
        return await self._table.run(name, argv, operation)

    # -- cancellation rows -------------------------------------------------------------

    async def add(
        self,
        scope: str,
        key: str,
        reason: str | None,
        *,
        limits: Limits,
        require_in_flight: bool = False,
        operator: bool = False,
        track_wait: float = 0.0,
    ) -> AddResult:
        # A request in flight here is in flight, whether or not its track has reached
        # Redis yet: its young calls are tracked first (so the row binds to them, and
        # the end of each clears it), then its cancellation is recorded.
        held = self._journal.holds(scope, key)
        if held:
            await self._home.at_home(
                functools.partial(self._journal.promoted, scope, key), self.timeout * 2
            )
        here = require_in_flight and held
        call = AddCall(
            scope=scope,
            key=key,
            reason=reason,
            in_flight=require_in_flight and not here,
            limits=limits,
            worker=self.worker_id,
            budget=self._eviction_chunk,
            epoch=self._journal.epoch,
            grace_ms=self._journal.grace_ms,
            recovering=self._journal.recovering(),
            operator=operator,
            waiter=uuid.uuid4().hex,
            wait_ms=int(1000 * (track_wait + WAIT_MARGIN)),
        )
        evicted: list[tuple[str, int]] = []
        while True:  # more than one call only while a large eviction batch is under way
            try:
                reply = AddReply.decode(await self._run("ADD", call.argv(self._prefix)))
            except asyncio.CancelledError:
                if call.in_flight:  # it may have left a waiting cancellation: withdraw it
                    await self._withdraw_anyway(WithdrawCall(scope, key, call.waiter))
                raise
            except StorageUnavailable:
                if not (here and require_in_flight) or evicted:
                    raise
                # Redis cannot answer, but this worker runs the request: stop its calls
                # here (202); other workers' calls of the id, which it cannot see, keep
                # running. Only what this worker cannot know gets a 503.
                logger.warning(
                    "Redis unavailable: cancelled request %s of scope %s in this worker only",
                    printable(key),
                    printable(scope),
                )
                self._flip(scope, key, reason, operator)
                return AddResult("recorded")
            if reply.lost:  # this worker's view of the table is old
                self._home.soon(self._journal.want_resync)
            reply.collect(evicted)
            if reply.outcome != "evicting":
                break
            call = dataclasses.replace(call, owed=reply.owed, partial=reply.partial)
        outcome = reply.outcome
        if outcome == "recovering":
            # The table was lost, or Redis is just back: a worker may not have re-tracked
            # its requests yet, so "not in flight" cannot be told. The client may retry.
            raise StorageUnavailable("Redis is resynchronising the table; retry shortly")
        if outcome == "waiting":
            # Answered 202 if no track claims it: kept as a lapsed cancellation, which a
            # call tracked late (its worker's loop blocked) still meets by its start.
            kept = limits.max_rows_per_scope or LAPSES_KEPT
            withdraw = WithdrawCall(scope, key, call.waiter, int(1000 * LAPSE), kept)
            claimed = await self._withdraw(withdraw, track_wait)
            return AddResult("recorded" if claimed else "not_in_flight", (), reply.over_quota)
        if outcome in ("recorded", "updated"):
            self._flip(scope, key, reason, operator)
            if not require_in_flight:  # (the row may be pending: a call here claims it)
                self._journal.remember_pending([(scope, key)])
        over = outcome == "recorded" and reply.over_quota
        return AddResult(outcome, tuple(evicted), over)  # type: ignore[arg-type]

    async def _withdraw(self, call: WithdrawCall, wait: float) -> bool:
        """Wait *wait* seconds for a track to claim a waiting cancellation, then withdraw it
        (also when the wait is cancelled: nothing of it may outlive its answer, and should
        the withdrawal fail, it lapses ``WAIT_MARGIN`` after the wait). Whether a track
        claimed it."""
        try:
            await asyncio.sleep(wait)
        except asyncio.CancelledError:
            await self._withdraw_anyway(call)
            raise
        return WithdrawCall.claimed(await self._run("WITHDRAW", call.argv(self._prefix), "add"))

    async def _withdraw_anyway(self, call: WithdrawCall) -> None:
        """Withdraw a waiting cancellation for a caller that was cancelled (shielded; a
        failure leaves it to lapse, ``WAIT_MARGIN`` after its wait)."""
        withdraw = self._run("WITHDRAW", call.argv(self._prefix), "add")
        with contextlib.suppress(StorageUnavailable, asyncio.CancelledError):
            await asyncio.shield(asyncio.ensure_future(withdraw))

    def _flip(self, scope: str, key: str, reason: str | None, operator: bool) -> None:
        """Flip this worker's tokens of ``(scope, key)``."""
        method = OPERATOR if operator else None
        for token in self._journal.tokens(scope, key):
            token._cancel(reason, method)

    async def ping(self) -> None:
        """A ``PING`` within the storage's bounds (its failure is logged once, with the
        cause, and sent as ``storage.error``)."""
        await self._home.call(self._redis.ping, "heartbeat")

    async def get(self, scope: str, key: str) -> tuple[bool, str | None]:
        await self._settle()
        value = await self._home.call(
            lambda: self._redis.hget(self._table.keys.reasons, member(scope, key)), "get"
        )
        return (False, None) if value is None else (True, decode_reason(value))

    async def remove(self, scope: str, key: str) -> bool:
        call = RemoveCall(scope, key)
        return RemoveCall.removed(await self._run("REMOVE", call.argv(self._prefix)))

    async def _settle(self) -> None:
        """Let this worker's queued writes reach Redis first (bounded): a read then sees
        them."""
        await self._home.at_home(
            functools.partial(self._journal.settle, self.timeout), self.timeout * 2
        )

    # -- in-flight rows ----------------------------------------------------------------

    async def track(self, scope: str, key: str, owner: str, token: RequestToken) -> None:
        """Hold *token* here (pushed cancellations flip it from now on) and track it in
        Redis, waiting at most ``max_wait``: past it the track is sent when Redis answers."""
        if self.operator:
            raise ConfigurationError("an operator's RedisStorage tracks no request")
        track = functools.partial(self._track, (scope, key, owner), token)
        await self._home.at_home(track, self.timeout * 2)

    async def _track(self, row: tuple[str, str, str], token: RequestToken) -> None:
        """On the home loop: the listener runs from the first track on (a young call is
        found by the seeks it hears), then the journal holds the call."""
        if not self._push.started:
            self._on_call()
        await self._journal.track(row, token)

    async def untrack(self, scope: str, key: str, owner: str) -> None:
        untrack = functools.partial(self._journal.finish, (scope, key, owner), "U")
        await self._home.at_home(untrack, self.timeout * 2)

    async def finish(self, scope: str, key: str, owner: str) -> None:
        """Untrack *owner* and remove the cancellation row in one write. It rides with the
        next call to Redis; the caller waits for it at most ``max_wait``,
        and it reaches Redis even if Redis answers later, or the caller is cancelled."""
        finish = functools.partial(self._journal.finish, (scope, key, owner), "F")
        await self._home.at_home(finish, self.timeout * 2)

    async def in_flight_requests(self) -> list[InFlightRequest]:
        """Every request in flight in the table, read in pages (``SSCAN`` of each worker's
        owners, a thousand a command: never one long command, however large the table),
        each marked with whether its worker's heartbeat is alive. Only reads."""
        await self._settle()
        return await read_in_flight(self._redis, self._table.keys, self._home.call)

    async def check_table(self) -> None:
        """Raise :class:`~mcp_cancellation._errors.TableNotFound` unless a worker has
        created this table (its prefix and partition layout), saying what the server
        holds instead. Only reads (the operator tools call it first)."""
        _, count = self.partition
        if count != 1:  # one partition of a PartitionedRedisStorage: that one checks
            return
        await self._home.call(functools.partial(check_layout, self._redis, self.prefix, 1), "stats")

    async def is_tracked(self, scope: str, key: str) -> bool:
        if self._journal.holds(scope, key):  # (a young call is in flight, untracked)
            return True
        await self._settle()
        flight = self._table.keys.flight(scope, key)
        return bool(await self._home.call(lambda: self._redis.exists(flight), "is_tracked"))

    # -- maintenance -------------------------------------------------------------------

    async def cleanup(self, ttl: float | None, dead_owners: Collection[str]) -> tuple[int, int]:
        dead = set(dead_owners)
        return await self._home.at_home(functools.partial(self._cleanup, ttl, dead))

    async def _cleanup(self, ttl: float | None, dead: set[str]) -> tuple[int, int]:
        # This worker's dead owners: forgotten here, released through the journal (their
        # cancellation rows go with them unless another owner is still in flight).
        in_flight_removed = len(self._journal.sweep(dead))
        await self._journal.settle(self.timeout)
        ttl_us = None if ttl is None else max(0, int(ttl * 1_000_000))
        call = CleanupCall(self.worker_id, ttl_us, self._cleanup_batch, self._heartbeat_ms)
        removed = 0
        while True:
            reply = CleanupReply.decode(await self._run("CLEANUP", call.argv(self._prefix)))
            removed += reply.removed
            in_flight_removed += reply.in_flight_removed
            if not reply.more:
                return removed, in_flight_removed

    async def stats(self) -> StorageStats:
        await self._settle()

        async def read() -> tuple[Any, Any]:
            pipe = self._redis.pipeline(transaction=False)
            pipe.zrange(self._table.keys.scopes, 0, -1, withscores=True)
            pipe.hgetall(self._table.keys.owners_by_scope)
            rows, flights = await pipe.execute()
            return rows, flights

        rows, flights = await self._home.call(read, "stats")
        return StorageStats(
            rows={text(scope): int(n) for scope, n in rows},
            in_flight={text(scope): int(n) for scope, n in flights.items() if int(n) > 0},
        )

    async def summary(self, top_k: int, at_least: int | None = None) -> TableSummary:
        """Totals by scope kind, the *top_k* largest scopes and the number holding at least
        *at_least* rows: one script, O(k log n)."""
        call = SummaryCall(top_k, at_least)
        return SummaryCall.decode(await self._run("SUMMARY", call.argv(self._prefix), "stats"))

    def stats_from_thread(self, timeout: float) -> StorageStats | None:
        """:meth:`stats` on the home loop, from another thread, within *timeout*."""
        return self._home.from_thread(self.stats, timeout)

    def summary_from_thread(
        self, top_k: int, timeout: float, at_least: int | None = None
    ) -> TableSummary | None:
        """:meth:`summary` on the home loop, from another thread, within *timeout*."""
        return self._home.from_thread(functools.partial(self.summary, top_k, at_least), timeout)

    # -- push ----------------------------------------------------------------------------

    def _hearing_seeks(self) -> None:
        """The listener has subscribed to the seeks (on the home loop): read the pending
        rows recorded before (their seeks were missed), then let calls stay young."""
        if self._reloading is None or self._reloading.done():
            self._reloading = asyncio.get_running_loop().create_task(self._reload_pending())

    async def _reload_pending(self) -> None:
        """Read which requests have a pending row (``HSCAN`` of ``P reasons``, a thousand
        a page, each page bounded), so that a call of one is tracked at its start; only
        then may calls stay young. Retried every second while Redis cannot answer (calls
        are tracked at their start meanwhile)."""
        if self._journal.delay <= 0:
            return
        reasons = self._table.keys.reasons
        while self._push.subscribed:
            found: list[tuple[str, str]] = []
            cursor = 0
            try:
                while True:
                    page = functools.partial(self._redis.hscan, reasons, cursor, count=1000)
                    cursor, rows = await self._home.call(page, "get")  # (a read)
                    pairs = cast(dict[bytes, bytes], rows)
                    found += [split_member(m) for m, v in pairs.items() if v[:1] == b"*"]
                    if not cursor:
                        break
            except StorageUnavailable:
                await asyncio.sleep(1.0)
                continue
            self._journal.remember_pending(found)
            self._journal.hear_seeks(True)
            return

    @property
    def heartbeats(self) -> int:
        """Beats this worker's heartbeat beater made (for health checks and tests)."""
        return self._liveness.beats if self._liveness is not None else 0

    @property
    def resyncs(self) -> int:
        """Resyncs this worker finished (each re-tracks its requests in Redis)."""
        return self._journal.resyncs

    async def resync(self) -> int:
        """Re-track this worker's in-flight rows in Redis, flip the tokens of those
        cancelled meanwhile and release the rows Redis holds for this worker beyond them
        (one round trip, with the writes still queued). Returns the number of tokens
        flipped. Runs by itself after every (re)subscription, when the table was lost
        and when this worker's heartbeat lapsed."""
        return await self._home.at_home(self._journal.resync)

    async def aclose(self) -> None:
        """Stop the listener and heartbeat and close the client if this storage made it.

        Must run on the loop the storage was first used on (or before any use).
        """
        if self._home.closed:
            return
        await self._journal.close(self.timeout)
        self._home.closed = True
        if self._reloading is not None:
            self._reloading.cancel()
            await asyncio.wait([self._reloading])
        if self._liveness is not None:
            await asyncio.to_thread(self._liveness.stop)
        await self._push.stop()
        if self._close_client:
            with contextlib.suppress(Exception):  # a client that is already gone
                await self._redis.aclose()
