"""``RedisStorage``: the registry's operations on the shared table, one script each.

The package docstring (:mod:`mcp_cancellation.storage.redis`) describes the design; the
key layout and the scripts are in :mod:`._scripts`, the background push in :mod:`._push`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import uuid
from collections.abc import Collection
from typing import TYPE_CHECKING, Any, Self, TypeVar

from ..._extras import requires
from ...errors import ConfigurationError, StorageUnavailable
from .._health import Health
from .._in_flight import Row
from ..base import AddResult, Limits, Storage, StorageStats, TableSummary
from . import _scripts as scripts
from ._cluster import ShardSubscription, is_cluster
from ._codec import (
    add_arguments,
    collect_evicted,
    decode_reason,
    decode_summary,
    member,
    text,
    to_bytes,
)
from ._connect import client_from_url, table_identity
from ._home import HomeLoop
from ._local import LocalRequests
from ._push import ChannelSubscription, Push, Subscription

with requires("redis", "RedisStorage"):
    from redis.asyncio import Redis
    from redis.asyncio.cluster import RedisCluster
    from redis.exceptions import NoScriptError

if TYPE_CHECKING:
    from redis.commands.core import AsyncScript

    from ...token import RequestToken

__all__ = ["DEFAULT_PREFIX", "RedisStorage"]

logger = logging.getLogger("mcp_cancellation.redis")

DEFAULT_PREFIX = "mcp-cancellation"
#: Rows one ``ADD`` script may evict: a few milliseconds of Redis time at worst (one-row
#: scopes, the costliest shape; docs/performance.md).
DEFAULT_EVICTION_CHUNK = 250
#: Expired rows one ``CLEANUP`` script may remove: a few milliseconds of Redis time at
#: worst (scopes that each lose their oldest row, the costliest shape; docs/performance.md).
DEFAULT_CLEANUP_BATCH = 500
T = TypeVar("T")


class RedisStorage(Storage):
    """Rows in Redis, shared by every worker and node that uses the same prefix.

    *client* is a ``redis.asyncio.Redis`` client, or a ``redis.asyncio.RedisCluster`` for
    a Redis Cluster (prefer ``decode_responses=False`` and bounded ``socket_timeout`` /
    ``socket_connect_timeout``); :meth:`from_url` builds either with sensible bounds. On a
    cluster, pushed cancellations use sharded pub/sub (Redis >= 7) and at most
    *max_concurrency* calls run at once (the others wait, within *timeout*), since the
    cluster client's pool refuses a burst instead of queueing it: with your own
    ``RedisCluster``, keep it a few below the client's ``max_connections`` (per node).
    *timeout* caps every storage call, retries included.
    *heartbeat_ttl* is how long a silent worker keeps its in-flight rows. *identity* names
    the table in metrics (the ``storage`` label); by default it is derived from the
    server's address, the database and the prefix (see :attr:`identity`).
    *eviction_chunk* bounds the rows one script evicts: a larger eviction batch (the cap's
    ``max_rows // 20``) is taken by several scripts in a row, which together evict exactly
    what one would, so Redis serves other clients in between (``None``: one script).
    """

    name = "redis"

    def __init__(
        self,
        client: Redis | RedisCluster,
        *,
        prefix: str = DEFAULT_PREFIX,
        timeout: float = 5.0,
        heartbeat_ttl: float = 30.0,
        cleanup_batch: int = DEFAULT_CLEANUP_BATCH,
        reconnect_backoff: tuple[float, float] = (0.05, 2.0),
        close_client: bool = False,
        identity: str | None = None,
        eviction_chunk: int | None = DEFAULT_EVICTION_CHUNK,
        max_concurrency: int = 50,
    ) -> None:
        if not prefix or "{" in prefix or "}" in prefix:
            raise ConfigurationError("prefix must be non-empty and contain no '{' or '}'")
        if timeout <= 0 or heartbeat_ttl <= 0 or cleanup_batch < 1:
            raise ConfigurationError("timeout, heartbeat_ttl and cleanup_batch must be > 0")
        if eviction_chunk is not None and eviction_chunk < 1:
            raise ConfigurationError("eviction_chunk must be >= 1 or None")
        self._eviction_chunk = eviction_chunk
        self._redis = client
        self.prefix = prefix
        self._identity = identity if identity is not None else table_identity(client, prefix)
        self._prefix = to_bytes("{" + prefix + "}:")
        self._routing_key = self._prefix + b"scopes"
        self.timeout = timeout
        self.heartbeat_ttl = heartbeat_ttl
        self._cleanup_batch = cleanup_batch
        self._close_client = close_client
        self._bound = False
        self._used = False  # once a call was made, the worker id is fixed
        self.cluster = is_cluster(client)
        self._sources = {name: scripts.source(name, sharded=self.cluster) for name in scripts.NAMES}
        self._scripts: dict[str, AsyncScript] = {
            name: client.register_script(text) for name, text in self._sources.items()
        }
        self._local = LocalRequests()
        self._health = Health(self, "Redis")
        subscription: Subscription
        concurrency: int | None = None  # a blocking pool queues a burst by itself
        if isinstance(client, RedisCluster):
            subscription = ShardSubscription(client, self._routing_key)
            concurrency = max_concurrency  # the cluster pool refuses one: queue it here
        else:
            subscription = ChannelSubscription(client)
        self._home = HomeLoop(timeout, self._on_call, self._health, concurrency)
        self._push = Push(
            client=client,
            subscription=subscription,
            home=self._home,
            prefix=self._prefix,
            local=self._local,
            run_script=self._script,
            resync=self.resync,
            heartbeat_ttl=heartbeat_ttl,
            backoff=reconnect_backoff,
        )
        self._push.worker = uuid.uuid4().hex[:12]

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        socket_timeout: float = 2.0,
        connect_timeout: float = 2.0,
        timeout: float = 5.0,
        heartbeat_ttl: float = 30.0,
        retries: int = 1,
        max_connections: int = 50,
        cleanup_batch: int = DEFAULT_CLEANUP_BATCH,
        reconnect_backoff: tuple[float, float] = (0.05, 2.0),
        identity: str | None = None,
        eviction_chunk: int | None = DEFAULT_EVICTION_CHUNK,
        cluster: bool | None = None,
        **client_kwargs: Any,
    ) -> Self:
        """Connect to ``redis://`` / ``rediss://`` / ``unix://`` *url*, or to a Redis
        Cluster: ``redis+cluster://[user:pass@]host:port[,host:port...]`` (``rediss+cluster``
        for TLS), or any ``redis://`` URL with ``cluster=True``. Every node listed in a
        cluster URL is a startup node.

        Each command waits at most *socket_timeout* (*connect_timeout* to connect) and is
        retried *retries* times at once (which also heals a pooled connection that the
        server closed); *timeout* caps the whole call, including the wait for one of the
        pool's *max_connections* (plus the pub/sub connection). On a cluster a command is
        retried with a short backoff until *timeout* instead, so one issued during a
        failover succeeds once a replica has taken over. Extra keyword arguments go to
        ``redis.asyncio.BlockingConnectionPool.from_url`` (to ``RedisCluster`` on a
        cluster). The client is closed by :meth:`aclose`.
        """
        options: dict[str, Any] = {
            "prefix": prefix,
            "timeout": timeout,
            "heartbeat_ttl": heartbeat_ttl,
            "cleanup_batch": cleanup_batch,
            "reconnect_backoff": reconnect_backoff,
            "close_client": True,
            "identity": identity,
            "eviction_chunk": eviction_chunk,
        }
        client, concurrency = client_from_url(
            url,
            socket_timeout=socket_timeout,
            connect_timeout=connect_timeout,
            timeout=timeout,
            retries=retries,
            max_connections=max_connections,
            cluster=cluster,
            **client_kwargs,
        )
        if concurrency is not None:
            options["max_concurrency"] = concurrency
        return cls(client, **options)

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
        """Whether Redis answered this storage's last call."""
        return self._health.available

    @property
    def worker_id(self) -> str:
        """This worker's id in Redis (the registry's instance id once bound)."""
        return self._push.worker

    @property
    def subscribed(self) -> bool:
        """Whether the listener currently holds a live subscription (for health checks)."""
        return self._push.subscribed

    def bind(self, instance_id: str) -> None:
        """Name this worker after the registry's instance id (first registry wins)."""
        if not self._bound and not self._used:
            self._push.worker = instance_id
        self._bound = True

    def key(self, *parts: str) -> bytes:
        """A full key name under this storage's prefix (for tests and operators)."""
        return self._prefix + to_bytes("".join(parts))

    def __repr__(self) -> str:
        return f"<RedisStorage prefix={self.prefix!r} worker={self.worker_id!r}>"

    def _on_call(self) -> None:
        """Before each call, on the home loop: the worker id is fixed from now on, and the
        background tasks (listener, heartbeat) run."""
        self._used = True
        if not self._push.started and not self._home.closed:
            self._push.start()

    async def _script(self, name: str, *args: bytes | str | int) -> Any:
        argv = [self._prefix, *args]
        try:
            # EVALSHA; on NOSCRIPT redis-py loads the script and tries once more.
            return await self._scripts[name](keys=[self._routing_key], args=argv)
        except NoScriptError:
            # Still unknown where the command went: on a cluster, a replica just promoted
            # by a failover, which SCRIPT LOAD (sent to the primaries the client knew of)
            # missed. EVAL carries the text, and leaves it in that node's cache.
            return await self._redis.eval(self._sources[name], 1, self._routing_key, *argv)

    async def _run(self, name: str, *args: bytes | str | int, operation: str = "") -> Any:
        """One script, on the home loop, bounded and translated; a failure is reported
        as *operation* (default: the script's name)."""
        call = functools.partial(self._script, name, *args)
        return await self._home.call(call, operation or name.lower())

    # -- cancellation rows -------------------------------------------------------------

    async def add(
        self,
        scope: str,
        key: str,
        reason: str | None,
        *,
        limits: Limits,
        require_in_flight: bool = False,
    ) -> AddResult:
        args = [
            *add_arguments(scope, key, reason, limits, require_in_flight),
            self.worker_id,
            "" if self._eviction_chunk is None else str(self._eviction_chunk),
        ]
        shadow = "1" if limits.shadow_quota else "0"
        evicted: list[tuple[str, int]] = []
        owed: bytes | str = ""
        partial: bytes | str = ""
        while True:  # more than one call only while a large eviction batch is under way
            reply = await self._run("ADD", *args, owed, partial, shadow)
            outcome = text(reply[0])
            collect_evicted(evicted, reply)
            if outcome != "evicting":
                break
            owed, partial = str(int(reply[2])), to_bytes(reply[3])
        if outcome in ("recorded", "updated"):
            for token in self._local.tokens(scope, key):
                token.set_cancelled(reason)
        over = outcome == "recorded" and bool(int(reply[4]))
        return AddResult(outcome, tuple(evicted), over)  # type: ignore[arg-type]

    async def get(self, scope: str, key: str) -> tuple[bool, str | None]:
        value = await self._home.call(
            lambda: self._redis.hget(self._prefix + b"reasons", member(scope, key)), "get"
        )
        return (False, None) if value is None else (True, decode_reason(value))

    async def remove(self, scope: str, key: str) -> bool:
        return bool(await self._run("REMOVE", to_bytes(scope), to_bytes(key)))

    # -- in-flight rows ----------------------------------------------------------------

    async def track(self, scope: str, key: str, owner: str, token: RequestToken) -> None:
        # Register locally first: a pushed message or a resync may flip it from now on,
        # and if Redis is down the next resync re-tracks it remotely.
        row = (scope, key, owner)
        self._local.track(row, token)
        try:
            value, created = await self._run(
                "TRACK",
                to_bytes(scope),
                to_bytes(key),
                to_bytes(owner),
                self.worker_id,
                self._push.heartbeat_ms,
            )
        except StorageUnavailable:
            raise  # still tracked locally: the next resync tracks it in Redis
        except BaseException:
            # Cancelled (or failed) midway: the caller treats the request as never tracked,
            # so drop it here and have the next resync or cleanup untrack it in Redis.
            self._local.forget(row)
            self._local.orphan([row])
            raise
        if value is not None:
            token.set_cancelled(decode_reason(value))
        if int(created) and self._local.holds_others(scope, key):
            # The heartbeat had lapsed, so another worker's cleanup may have swept this
            # worker's other rows; the heartbeat task would no longer see it missing.
            self._push.want_resync()

    async def untrack(self, scope: str, key: str, owner: str) -> None:
        row = (scope, key, owner)
        try:
            resync = self._local.forget_unless_held(row)
            if resync is not None:
                await self._after_resync(row, resync)
            await self._run("UNTRACK", to_bytes(scope), to_bytes(key), to_bytes(owner))
        except BaseException:  # unavailable, or cancelled midway: release it later
            self._local.forget(row)
            self._local.orphan([row])
            raise

    async def finish(self, scope: str, key: str, owner: str) -> None:
        """Untrack *owner* and remove the cancellation row in one round trip.

        Runs to completion (bounded by the timeout) even if the calling task is cancelled
        meanwhile; the cancellation is re-raised afterwards.
        """
        row = (scope, key, owner)
        resync = self._local.forget_unless_held(row)

        async def run() -> None:
            if resync is not None:
                await self._after_resync(row, resync)
            try:
                await self._run("FINISH", to_bytes(scope), to_bytes(key), to_bytes(owner))
            except StorageUnavailable:
                # Owe both halves: left in place, the cancellation row would start the
                # next request with this id cancelled (clients reuse ids) until its TTL.
                self._local.orphan([row])
                self._local.owe_clear(scope, key)
                raise

        await self._home.to_completion(run)

    async def _after_resync(self, row: Row, resync: concurrent.futures.Future[None] | None) -> None:
        """Forget *row* once no running resync holds it (*resync*: the one that did): its
        script re-tracks the rows it began with, so this row's release must reach Redis
        after it. A resync's script is bounded by the storage's timeout."""
        while resync is not None:
            # (No scope in the line: a session id is a secret.)
            logger.debug("an in-flight row's release waits for the resync under way")
            # Shielded: a cancelled waiter must not cancel the resync's future for the others.
            await asyncio.shield(asyncio.wrap_future(resync))
            resync = self._local.forget_unless_held(row)

    async def is_tracked(self, scope: str, key: str) -> bool:
        flight = self._prefix + b"f:" + member(scope, key)
        return bool(await self._home.call(lambda: self._redis.exists(flight), "is_tracked"))

    # -- maintenance -------------------------------------------------------------------

    async def cleanup(self, ttl: float | None, dead_owners: Collection[str]) -> tuple[int, int]:
        dead = set(dead_owners)
        return await self._home.at_home(functools.partial(self._cleanup, ttl, dead))

    async def _cleanup(self, ttl: float | None, dead: set[str]) -> tuple[int, int]:
        async with self._push.maintenance():
            swept = self._local.sweep(dead)
            # Rows an earlier untrack or finish failed to release go along.
            release: list[Row] = sorted({*swept, *self._local.orphans()})
            ttl_arg = "" if ttl is None else str(max(0, int(ttl * 1_000_000)))
            args: list[bytes | str | int] = []
            for scope, key, owner in release:
                args += [to_bytes(scope), to_bytes(key), to_bytes(owner)]
            removed = in_flight_removed = 0
            while True:
                # The first pass also untracks; later ones only continue the TTL sweep.
                call = [self.worker_id, ttl_arg, str(self._cleanup_batch), *args]
                try:
                    reply = await self._run("CLEANUP", *call)
                except BaseException:  # unavailable, or cancelled midway
                    if args:
                        self._local.orphan(swept)  # released by a later pass
                    raise
                if args:
                    self._local.released(release)
                    args = []
                removed += int(reply[0])
                in_flight_removed += int(reply[1])
                if not int(reply[2]):
                    return removed, in_flight_removed

    async def stats(self) -> StorageStats:
        async def read() -> tuple[Any, Any]:
            pipe = self._redis.pipeline(transaction=False)
            pipe.zrange(self._prefix + b"scopes", 0, -1, withscores=True)
            pipe.hgetall(self._prefix + b"fs")
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
        reply = await self._run(
            "SUMMARY",
            str(max(0, top_k)),
            "" if at_least is None else str(at_least),
            operation="stats",
        )
        return decode_summary(reply)

    def stats_from_thread(self, timeout: float) -> StorageStats | None:
        """:meth:`stats` on the home loop, from another thread, within *timeout*."""
        return self._home.from_thread(self.stats, timeout)

    def summary_from_thread(
        self, top_k: int, timeout: float, at_least: int | None = None
    ) -> TableSummary | None:
        """:meth:`summary` on the home loop, from another thread, within *timeout*."""
        return self._home.from_thread(functools.partial(self.summary, top_k, at_least), timeout)

    # -- push ----------------------------------------------------------------------------

    async def resync(self) -> int:
        """Re-track this worker's in-flight rows in Redis and flip the tokens of those
        cancelled meanwhile (one round trip); release rows owed to Redis. Returns the
        number of tokens flipped. Runs by itself after every (re)subscription."""
        return await self._push.resync()

    async def aclose(self) -> None:
        """Stop the listener and heartbeat and close the client if this storage made it.

        Must run on the loop the storage was first used on (or before any use).
        """
        if self._home.closed:
            return
        self._home.closed = True
        await self._push.stop()
        await self._home.drain()
        if self._close_client:
            with contextlib.suppress(Exception):  # a client that is already gone
                await self._redis.aclose()
