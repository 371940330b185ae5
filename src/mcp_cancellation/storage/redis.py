"""Redis storage: one table shared by every worker and node, with pushed cancellations.

:class:`RedisStorage` keeps the registry's rows in Redis (or Valkey) with exactly the
semantics of :class:`~mcp_cancellation.MemoryStorage`:

* **One round trip, atomically.** :meth:`~RedisStorage.add` runs one Lua script that checks
  ``require_in_flight``, updates an existing row (never refused), applies the per-scope
  quota, evicts a full batch at the cap (largest scope first, oldest row first, spilling
  into the next) and inserts; ages come from the Redis server's clock, so workers with
  skewed clocks agree. The key layout and the cost of each step are described in
  :mod:`mcp_cancellation.storage._redis_scripts`.
* **Cluster-ready, shareable.** Every key starts with ``{<prefix>}:``; the braces are a
  hash tag, so all keys live in one slot of a Redis Cluster, and distinct prefixes let
  several apps (or tests) share one Redis.
* **Push, not poll.** Tokens of this worker's in-flight requests live in a local map. A
  cancellation recorded here flips them at once; one recorded by another worker is
  published by the script on this worker's channel (``{<prefix>}:c:<worker>``) and a
  background listener flips them. Tools therefore read ``cancelled()`` without any round
  trip. After the listener (re)subscribes, and whenever this worker's heartbeat is found
  missing (Redis restarted, or the worker was cut off beyond the TTL), the worker
  *resynchronises*: one script re-tracks its local in-flight rows and reports which of
  them were cancelled meanwhile, so a message lost during a disconnect is not a lost
  cancellation.
* **Owners across processes.** In-flight rows name their worker (the registry's instance
  id, given to :meth:`bind`). Each worker refreshes a heartbeat key
  (``heartbeat_ttl``, refreshed every third of it) from a background task; :meth:`cleanup`
  also removes the in-flight rows of workers whose heartbeat expired, so a worker killed
  with SIGKILL leaves nothing behind beyond the TTL plus one janitor interval.
* **Faults.** Every call is bounded by the socket timeouts and by ``timeout`` overall;
  connection errors and timeouts become :class:`~mcp_cancellation.StorageUnavailable`.
  Nothing needs a restart when Redis comes back: the client reconnects on the next call
  and the listener reconnects with exponential backoff. :meth:`finish` completes even if
  the calling task is cancelled meanwhile; if Redis is unreachable its rows are queued
  and released by the next resync or cleanup.

Background tasks (listener and heartbeat) start lazily at the first call and stop in
:meth:`aclose`. The storage belongs to one event loop, its *home*: the loop running when
it is constructed, or else the first loop that uses it. Calls made from another thread's
event loop are forwarded to the home loop (which must be running: otherwise they raise
:class:`~mcp_cancellation.StorageUnavailable` within the timeout), and :meth:`aclose`
must run on it. Build the storage where the application's loop runs (an ASGI lifespan,
``async def main``) or use it there first.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import threading
import uuid
from collections.abc import Awaitable, Callable, Collection, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Self, TypeVar

from .._extras import requires
from ..errors import ConfigurationError, StorageUnavailable
from . import _redis_scripts as scripts
from .base import AddResult, Limits, Storage, StorageStats

with requires("redis", "RedisStorage"):
    from redis import exceptions as redis_errors
    from redis.asyncio import BlockingConnectionPool, Redis
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff


if TYPE_CHECKING:
    from redis.asyncio.client import PubSub
    from redis.commands.core import AsyncScript

    from ..token import RequestToken

__all__ = ["DEFAULT_PREFIX", "RedisStorage"]

logger = logging.getLogger("mcp_cancellation.redis")

DEFAULT_PREFIX = "mcp-cancellation"

T = TypeVar("T")
_Triple = tuple[str, str, str]  # (scope, key, owner)

#: Errors that mean "Redis cannot answer right now" (as opposed to a bug).
_UNAVAILABLE: tuple[type[BaseException], ...] = (
    redis_errors.ConnectionError,  # includes BusyLoadingError, MaxConnectionsError
    redis_errors.TimeoutError,
    redis_errors.ReadOnlyError,  # a replica promoted or demoted under us
    redis_errors.OutOfMemoryError,  # maxmemory reached: degrade, do not fail requests
    redis_errors.ClusterDownError,
    redis_errors.TryAgainError,
    TimeoutError,
    OSError,
)


def _b(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _s(value: bytes | str) -> str:
    return value if isinstance(value, str) else value.decode("utf-8", "surrogatepass")


def _raw(value: bytes | str) -> bytes:
    return value.encode("utf-8", "surrogatepass") if isinstance(value, str) else value


def _encode_reason(reason: str | None) -> bytes:
    return b"-" if reason is None else b"+" + _b(reason)


def _decode_reason(value: bytes | str) -> str | None:
    raw = _raw(value)
    return None if raw[:1] == b"-" else raw[1:].decode("utf-8", "surrogatepass")


def _member(scope: str, key: str) -> bytes:
    raw = _b(scope)
    return str(len(raw)).encode() + b":" + raw + _b(key)


def _netstrings(data: bytes) -> list[bytes]:
    """Split ``<len>:<bytes><len>:<bytes>...`` (the pub/sub message format)."""
    out: list[bytes] = []
    pos = 0
    while pos < len(data):
        colon = data.index(b":", pos)
        size = int(data[pos:colon])
        out.append(data[colon + 1 : colon + 1 + size])
        pos = colon + 1 + size
    return out


def _reraise_cancellation() -> None:
    """Re-raise a cancellation of the current task that a client library turned into an
    ordinary error (so background loops stop when told to)."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class RedisStorage(Storage):
    """Rows in Redis, shared by every worker and node that uses the same prefix.

    *client* is a ``redis.asyncio.Redis`` client (prefer ``decode_responses=False`` and
    bounded ``socket_timeout`` / ``socket_connect_timeout``); :meth:`from_url` builds one
    with sensible bounds. *timeout* caps every storage call, retries included.
    *heartbeat_ttl* is how long a silent worker keeps its in-flight rows.
    """

    name = "redis"

    def __init__(
        self,
        client: Redis,
        *,
        prefix: str = DEFAULT_PREFIX,
        timeout: float = 5.0,
        heartbeat_ttl: float = 30.0,
        cleanup_batch: int = 1000,
        reconnect_backoff: tuple[float, float] = (0.05, 2.0),
        close_client: bool = False,
    ) -> None:
        if not prefix or "{" in prefix or "}" in prefix:
            raise ConfigurationError("prefix must be non-empty and contain no '{' or '}'")
        if timeout <= 0 or heartbeat_ttl <= 0 or cleanup_batch < 1:
            raise ConfigurationError("timeout, heartbeat_ttl and cleanup_batch must be > 0")
        self._redis = client
        self.prefix = prefix
        self._p = _b("{" + prefix + "}:")
        self._routing_key = self._p + b"scopes"
        self.timeout = timeout
        self.heartbeat_ttl = heartbeat_ttl
        self._hb_ms = str(max(1, int(heartbeat_ttl * 1000)))
        self._cleanup_batch = cleanup_batch
        self._backoff = reconnect_backoff
        self._close_client = close_client
        self._worker = uuid.uuid4().hex[:12]
        self._bound = False
        self._used = False  # once a call was made, the worker id is fixed
        self._scripts: dict[str, AsyncScript] = {
            name: client.register_script(getattr(scripts, name))
            for name in ("ADD", "TRACK", "UNTRACK", "REMOVE", "FINISH", "RESYNC", "CLEANUP")
        }
        self._lock = threading.Lock()
        self._local: dict[tuple[str, str], dict[str, RequestToken]] = {}
        self._orphans: set[_Triple] = set()  # rows whose untrack failed, to retry
        # The storage's home loop: the one running now, else the first to use it.
        self._loop: asyncio.AbstractEventLoop | None = None
        with contextlib.suppress(RuntimeError):
            self._loop = asyncio.get_running_loop()
        self._tasks: list[asyncio.Task[None]] = []
        self._pending: set[asyncio.Future[Any]] = set()
        self._maintenance_lock: asyncio.Lock | None = None
        self._resync_wanted = asyncio.Event()
        self._subscribed = False
        self._closed = False

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
        cleanup_batch: int = 1000,
        reconnect_backoff: tuple[float, float] = (0.05, 2.0),
        **client_kwargs: Any,
    ) -> Self:
        """Connect to ``redis://`` / ``rediss://`` / ``unix://`` *url*.

        Each command waits at most *socket_timeout* (*connect_timeout* to connect) and is
        retried *retries* times at once (which also heals a pooled connection that the
        server closed); *timeout* caps the whole call, including the wait for one of the
        pool's *max_connections* (plus the pub/sub connection). Extra keyword arguments go
        to ``redis.asyncio.BlockingConnectionPool.from_url``. The client is closed by
        :meth:`aclose`.
        """
        # A blocking pool: a burst waits for one of max_connections (within the timeout)
        # instead of opening connections without bound.
        pool = BlockingConnectionPool.from_url(
            url,
            max_connections=max_connections,
            timeout=timeout,
            socket_timeout=socket_timeout,
            socket_connect_timeout=connect_timeout,
            retry=Retry(NoBackoff(), retries),
            decode_responses=False,
            **client_kwargs,
        )
        client = Redis.from_pool(pool)
        return cls(
            client,
            prefix=prefix,
            timeout=timeout,
            heartbeat_ttl=heartbeat_ttl,
            cleanup_batch=cleanup_batch,
            reconnect_backoff=reconnect_backoff,
            close_client=True,
        )

    # -- identity and plumbing -----------------------------------------------------------

    @property
    def client(self) -> Redis:
        """The underlying ``redis.asyncio`` client."""
        return self._redis

    @property
    def worker_id(self) -> str:
        """This worker's id in Redis (the registry's instance id once bound)."""
        return self._worker

    def bind(self, instance_id: str) -> None:
        """Name this worker after the registry's instance id (first registry wins)."""
        if not self._bound and not self._used:
            self._worker = instance_id
        self._bound = True

    def key(self, *parts: str) -> bytes:
        """A full key name under this storage's prefix (for tests and operators)."""
        return self._p + _b("".join(parts))

    def __repr__(self) -> str:
        return f"<RedisStorage prefix={self.prefix!r} worker={self._worker!r}>"

    async def _call(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Run *fn* on the storage's loop, bounded by the timeout, translating errors."""
        loop = asyncio.get_running_loop()
        if self._closed:
            raise StorageUnavailable("the Redis storage is closed")
        if self._loop is None:
            self._loop = loop
        self._used = True
        if loop is not self._loop:
            return await self._forward(fn)
        self._start_background()
        # redis-py can swallow a cancellation of the calling task (it retries the command,
        # or turns the cancellation into a connection error): a request cancelled during a
        # call must still stop, so a cancel requested meanwhile is re-raised here.
        task = asyncio.current_task()
        cancelling = task.cancelling() if task is not None else 0
        try:
            async with asyncio.timeout(self.timeout):
                result = await fn()
        except _UNAVAILABLE as exc:
            if task is not None and task.cancelling() > cancelling:
                raise asyncio.CancelledError from exc
            raise StorageUnavailable(f"Redis unavailable: {exc or type(exc).__name__}") from exc
        if task is not None and task.cancelling() > cancelling:
            raise asyncio.CancelledError
        return result

    async def _forward(self, fn: Callable[[], Awaitable[T]]) -> T:
        home = self._loop
        assert home is not None
        if home.is_closed() or not home.is_running():
            raise StorageUnavailable("the Redis storage's event loop is not running")

        async def run() -> T:
            return await self._call(fn)

        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(run(), home)
        try:
            # Bounded too: the home loop might stop before it runs the call.
            async with asyncio.timeout(self.timeout * 2):
                return await asyncio.wrap_future(future)
        except TimeoutError as exc:
            future.cancel()
            raise StorageUnavailable("the Redis storage's event loop did not answer") from exc

    async def _at_home(self, fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run a multi-step operation (cleanup, resync) on the home loop."""
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        if loop is self._loop:
            return await fn()
        home = self._loop
        if home.is_closed() or not home.is_running():
            raise StorageUnavailable("the Redis storage's event loop is not running")
        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(fn(), home)
        return await asyncio.wrap_future(future)

    def _maintenance(self) -> asyncio.Lock:
        """Serialises cleanup and resync, which both untrack queued rows (on the home loop,
        so one lock suffices); otherwise one could release rows the other then counts."""
        if self._maintenance_lock is None:
            self._maintenance_lock = asyncio.Lock()
        return self._maintenance_lock

    async def _script(self, name: str, *args: bytes | str | int) -> Any:
        return await self._scripts[name](keys=[self._routing_key], args=[self._p, *args])

    def _tokens(self, scope: str, key: str, owners: Collection[bytes] | None = None) -> list[Any]:
        with self._lock:
            table = self._local.get((scope, key))
            if not table:
                return []
            if owners is None:
                return list(table.values())
            wanted = {_s(o) for o in owners}
            return [token for owner, token in table.items() if owner in wanted]

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
        quota = limits.max_rows_per_scope
        cap = limits.max_rows
        reply = await self._call(
            lambda: self._script(
                "ADD",
                _b(scope),
                _b(key),
                _encode_reason(reason),
                "1" if require_in_flight else "0",
                "" if quota is None else str(quota),
                "" if cap is None else str(cap),
                str(limits.eviction_batch),
                self._worker,
            )
        )
        outcome = _s(reply[0])
        evicted = tuple((_s(reply[i]), int(reply[i + 1])) for i in range(1, len(reply), 2))
        if outcome in ("recorded", "updated"):
            for token in self._tokens(scope, key):
                token.set_cancelled(reason)
        return AddResult(outcome, evicted)  # type: ignore[arg-type]

    async def get(self, scope: str, key: str) -> tuple[bool, str | None]:
        value = await self._call(
            lambda: self._redis.hget(self._p + b"reasons", _member(scope, key))
        )
        return (False, None) if value is None else (True, _decode_reason(value))

    async def remove(self, scope: str, key: str) -> bool:
        return bool(await self._call(lambda: self._script("REMOVE", _b(scope), _b(key))))

    # -- in-flight rows ----------------------------------------------------------------

    async def track(self, scope: str, key: str, owner: str, token: RequestToken) -> None:
        # Register locally first: a pushed message or a resync may flip it from now on,
        # and if Redis is down the next resync re-tracks it remotely.
        with self._lock:
            self._local.setdefault((scope, key), {})[owner] = token
            self._orphans.discard((scope, key, owner))
        try:
            value, created = await self._call(
                lambda: self._script(
                    "TRACK", _b(scope), _b(key), _b(owner), self._worker, self._hb_ms
                )
            )
        except StorageUnavailable:
            raise  # still tracked locally: the next resync tracks it in Redis
        except BaseException:
            # Cancelled (or failed) midway: the caller treats the request as never tracked,
            # so drop it here and have the next resync or cleanup untrack it in Redis.
            self._forget(scope, key, owner)
            with self._lock:
                self._orphans.add((scope, key, owner))
            raise
        if value is not None:
            token.set_cancelled(_decode_reason(value))
        if int(created):
            # The heartbeat had lapsed, so another worker's cleanup may have swept this
            # worker's other rows; the heartbeat task would no longer see it missing.
            with self._lock:
                others = len(self._local) > 1 or len(self._local.get((scope, key), ())) > 1
            home = self._loop
            if others and home is not None and not home.is_closed():
                if home is asyncio.get_running_loop():
                    self._resync_wanted.set()
                else:
                    with contextlib.suppress(RuntimeError):  # the home loop just closed
                        home.call_soon_threadsafe(self._resync_wanted.set)

    def _forget(self, scope: str, key: str, owner: str) -> None:
        with self._lock:
            table = self._local.get((scope, key))
            if table is not None and table.pop(owner, None) is not None and not table:
                del self._local[(scope, key)]

    async def untrack(self, scope: str, key: str, owner: str) -> None:
        self._forget(scope, key, owner)
        try:
            await self._call(lambda: self._script("UNTRACK", _b(scope), _b(key), _b(owner)))
        except BaseException:  # unavailable, or cancelled midway: release it later
            with self._lock:
                self._orphans.add((scope, key, owner))
            raise

    async def finish(self, scope: str, key: str, owner: str) -> None:
        """Untrack *owner* and remove the cancellation row in one round trip.

        Runs to completion (bounded by the timeout) even if the calling task is cancelled
        meanwhile; the cancellation is re-raised afterwards.
        """
        self._forget(scope, key, owner)

        async def run() -> None:
            try:
                await self._call(lambda: self._script("FINISH", _b(scope), _b(key), _b(owner)))
            except StorageUnavailable:
                with self._lock:
                    self._orphans.add((scope, key, owner))
                raise

        task = asyncio.ensure_future(run())
        self._pending.add(task)
        task.add_done_callback(self._settle)
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.done():
                await asyncio.wait([task])
            raise

    def _settle(self, future: asyncio.Future[Any]) -> None:
        self._pending.discard(future)
        if not future.cancelled():
            future.exception()  # retrieved: finish() already reported it to its caller

    async def is_tracked(self, scope: str, key: str) -> bool:
        found = await self._call(lambda: self._redis.exists(self._p + b"f:" + _member(scope, key)))
        return bool(found)

    # -- maintenance -------------------------------------------------------------------

    async def cleanup(self, ttl: float | None, dead_owners: Collection[str]) -> tuple[int, int]:
        dead = set(dead_owners)
        return await self._at_home(functools.partial(self._cleanup, ttl, dead))

    async def _cleanup(self, ttl: float | None, dead: set[str]) -> tuple[int, int]:
        async with self._maintenance():
            return await self._cleanup_locked(ttl, dead)

    async def _cleanup_locked(self, ttl: float | None, dead: set[str]) -> tuple[int, int]:
        triples: list[_Triple] = []
        with self._lock:
            if dead:
                for (scope, key), table in list(self._local.items()):
                    for owner in [o for o in table if o in dead]:
                        del table[owner]
                        triples.append((scope, key, owner))
                    if not table:
                        del self._local[(scope, key)]
            # Rows an earlier untrack or finish failed to release go along.
            untrack = sorted({*triples, *self._orphans})
        ttl_arg = "" if ttl is None else str(max(0, int(ttl * 1_000_000)))
        args: list[bytes | str | int] = []
        for scope, key, owner in untrack:
            args += [_b(scope), _b(key), _b(owner)]
        removed = in_flight_removed = 0
        while True:
            # The first pass also untracks; later ones only continue the TTL sweep.
            call = [self._worker, ttl_arg, str(self._cleanup_batch), *args]
            try:
                reply = await self._call(functools.partial(self._script, "CLEANUP", *call))
            except BaseException:  # unavailable, or cancelled midway
                if args:
                    with self._lock:
                        self._orphans.update(triples)  # released by a later pass
                raise
            if args:
                with self._lock:
                    self._orphans.difference_update(untrack)
                args = []
            removed += int(reply[0])
            in_flight_removed += int(reply[1])
            if not int(reply[2]):
                return removed, in_flight_removed

    async def stats(self) -> StorageStats:
        async def read() -> tuple[Any, Any]:
            pipe = self._redis.pipeline(transaction=False)
            pipe.zrange(self._p + b"scopes", 0, -1, withscores=True)
            pipe.hgetall(self._p + b"fs")
            rows, flights = await pipe.execute()
            return rows, flights

        rows, flights = await self._call(read)
        return StorageStats(
            rows={_s(scope): int(n) for scope, n in rows},
            in_flight={_s(scope): int(n) for scope, n in flights.items() if int(n) > 0},
        )

    # -- push: listener, heartbeat, resync ---------------------------------------------

    def _start_background(self) -> None:
        if self._tasks or self._closed:
            return
        loop = asyncio.get_running_loop()
        self._resync_wanted = asyncio.Event()
        self._tasks = [
            loop.create_task(self._listen(), name=f"mcp-cancellation-redis-listen-{self._worker}"),
            loop.create_task(
                self._heartbeat(), name=f"mcp-cancellation-redis-heartbeat-{self._worker}"
            ),
        ]

    @property
    def subscribed(self) -> bool:
        """Whether the listener currently holds a live subscription (for health checks)."""
        return self._subscribed

    def _deliver(self, data: bytes | str) -> None:
        """Flip the tokens named by one pushed message."""
        try:
            fields = _netstrings(_raw(data))
            scope, key, reason = _s(fields[0]), _s(fields[1]), _decode_reason(fields[2])
        except (ValueError, IndexError):
            logger.warning("ignoring a malformed cancellation message")
            return
        for token in self._tokens(scope, key, fields[3:]):
            token.set_cancelled(reason)

    async def _listen(self) -> None:
        channel = self._p + b"c:" + _b(self._worker)
        delay = self._backoff[0]
        # A connection that silently died (a partition, no RST) never errors: ping it and
        # reconnect when nothing, not even the pong, came back in time.
        ping_every = min(self.heartbeat_ttl / 3, 10.0)
        loop = asyncio.get_running_loop()
        while not self._closed:
            pubsub: PubSub = self._redis.pubsub()
            try:
                async with asyncio.timeout(self.timeout):
                    await pubsub.subscribe(channel)
                last_seen = next_ping = loop.time()
                while True:
                    message = await pubsub.get_message(timeout=min(1.0, ping_every))
                    _reraise_cancellation()  # redis-py may swallow a cancellation
                    now = loop.time()
                    if now >= next_ping:
                        next_ping = now + ping_every
                        async with asyncio.timeout(self.timeout):
                            await pubsub.ping()
                    if message is None:
                        if now - last_seen > ping_every + self.timeout:
                            raise TimeoutError("no answer on the pub/sub connection")
                        continue
                    last_seen = now
                    kind = _s(message["type"])
                    if kind == "subscribe":
                        self._subscribed = True
                        delay = self._backoff[0]
                        self._resync_wanted.set()  # messages may have been missed
                    elif kind == "message":
                        self._deliver(message["data"])
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # any failure: reconnect with backoff, never die
                _reraise_cancellation()
                if self._subscribed:
                    logger.warning("Redis pub/sub connection lost: %s", exc)
                self._subscribed = False
            finally:
                self._subscribed = False
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(self.timeout):
                        await pubsub.aclose()  # type: ignore[no-untyped-call]
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._backoff[1])

    async def _heartbeat(self) -> None:
        interval = self.heartbeat_ttl / 3
        while not self._closed:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await self._resync_wanted.wait()
            _reraise_cancellation()
            wanted = self._resync_wanted.is_set()
            self._resync_wanted.clear()
            try:
                previous = await self._call(
                    lambda: self._redis.set(
                        self._p + b"hb:" + _b(self._worker), b"1", px=int(self._hb_ms), get=True
                    )
                )
                if wanted or previous is None or self._orphans:
                    await self.resync()
            except StorageUnavailable as exc:
                _reraise_cancellation()
                logger.debug("heartbeat failed: %s", exc)
                if wanted:
                    self._resync_wanted.set()
                    await asyncio.sleep(min(self._backoff[1], interval))
            except Exception:
                _reraise_cancellation()
                logger.exception("Redis heartbeat failed")

    async def resync(self) -> int:
        """Re-track this worker's in-flight rows in Redis and flip the tokens of those
        cancelled meanwhile (one round trip); release queued orphan rows. Returns the
        number of tokens flipped. Runs by itself after every (re)subscription."""
        return await self._at_home(self._resync)

    async def _resync(self) -> int:
        async with self._maintenance():
            return await self._resync_locked()

    async def _resync_locked(self) -> int:
        with self._lock:
            snapshot = [
                (scope, key, owner, token)
                for (scope, key), table in self._local.items()
                for owner, token in table.items()
            ]
            orphans = sorted(self._orphans)
        args: list[bytes | str | int] = [self._worker, self._hb_ms, str(len(snapshot))]
        for scope, key, owner, _ in snapshot:
            args += [_b(scope), _b(key), _b(owner)]
        for scope, key, owner in orphans:
            args += [_b(scope), _b(key), _b(owner)]
        reasons: Sequence[Any] = await self._call(lambda: self._script("RESYNC", *args))
        with self._lock:
            self._orphans.difference_update(orphans)
            # Requests that finished while the script ran: it may have re-tracked them.
            gone = [
                (scope, key, owner)
                for scope, key, owner, _ in snapshot
                if owner not in self._local.get((scope, key), {})
            ]
            self._orphans.update(gone)
        flipped = 0
        for (_, _, _, token), value in zip(snapshot, reasons, strict=False):
            if value is not None and not token.cancelled:
                token.set_cancelled(_decode_reason(value))
                flipped += 1
        if gone:
            self._resync_wanted.set()
        return flipped

    async def aclose(self) -> None:
        """Stop the listener and heartbeat and close the client if this storage made it.

        Must run on the loop the storage was first used on (or before any use).
        """
        if self._closed:
            return
        self._closed = True
        tasks, self._tasks = self._tasks, []
        # redis-py may turn a cancellation into a connection error; the loops also stop on
        # _closed, and we cancel again until they are done.
        while tasks:
            for task in tasks:
                task.cancel()
            _, pending = await asyncio.wait(tasks, timeout=0.1)
            tasks = list(pending)
        if self._pending:
            await asyncio.wait(list(self._pending))
        if self._close_client:
            with contextlib.suppress(Exception):
                await self._redis.aclose()
