"""Push between workers: the listener that flips tokens when another worker records a
cancellation, the heartbeat that keeps this worker's rows alive, and the resync that
repairs both after a disconnect.

* The listener subscribes to this worker's channel (``P c:<worker>``; on a cluster a
  sharded channel on the slot's master, :mod:`._cluster`), pings a connection that
  silently stopped answering and reconnects with exponential backoff.
* The heartbeat refreshes ``P hb:<worker>`` every third of its TTL; when the key was
  missing (Redis restarted, or the worker was cut off beyond the TTL), or after every
  (re)subscription, it resynchronises.
* The resync re-tracks this worker's local rows in one script and flips the tokens of
  those cancelled meanwhile, so a message lost during a disconnect is not a lost
  cancellation; it also releases the rows this worker owes Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast

from ...errors import StorageUnavailable
from ._codec import decode_reason, split_netstrings, text, to_bytes
from ._home import HomeLoop, reraise_cancellation
from ._local import LocalRequests

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from redis.asyncio.client import PubSub
    from redis.asyncio.cluster import RedisCluster

__all__ = ["ChannelSubscription", "Push", "Subscription"]

logger = logging.getLogger("mcp_cancellation.redis")

#: Runs one of the storage's Lua scripts by name with the given arguments.
RunScript = Callable[..., Awaitable[Any]]
#: Cancellation rows owed a removal that one script removes at most.
CLEAR_BATCH = 500


class Subscription(Protocol):
    """How the listener holds its channel: the message types it sees, and how a
    subscription is opened and its resources released."""

    confirmation: str
    message: str
    lost: str | None

    async def open(self, channel: bytes) -> PubSub: ...

    async def close(self) -> None: ...


class ChannelSubscription:
    """``SUBSCRIBE`` on the storage's own client (one Redis server)."""

    confirmation = "subscribe"
    message = "message"
    lost: str | None = None

    def __init__(self, client: Redis) -> None:
        self._client = client

    async def open(self, channel: bytes) -> PubSub:
        pubsub = self._client.pubsub()
        await pubsub.subscribe(channel)
        return pubsub

    async def close(self) -> None:
        return None


class Push:
    """The background half of one worker's Redis storage (see the module docstring)."""

    def __init__(
        self,
        *,
        client: Redis | RedisCluster,
        subscription: Subscription,
        home: HomeLoop,
        prefix: bytes,
        local: LocalRequests,
        run_script: RunScript,
        resync: Callable[[], Awaitable[int]],
        heartbeat_ttl: float,
        backoff: tuple[float, float],
    ) -> None:
        self.worker = ""  # set by the storage before the first call
        self._client = client
        self._subscription = subscription
        self._home = home
        self._prefix = prefix
        self._local = local
        self._run_script = run_script
        self._resync_entry = resync  # the storage's public resync(), which calls resync()
        self.heartbeat_ttl = heartbeat_ttl
        self.heartbeat_ms = str(max(1, int(heartbeat_ttl * 1000)))
        self._backoff = backoff
        self._tasks: list[asyncio.Task[None]] = []
        self._maintenance_lock: asyncio.Lock | None = None
        self._resync_wanted = asyncio.Event()
        self.subscribed = False

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def started(self) -> bool:
        return bool(self._tasks)

    def start(self) -> None:
        """Start the listener and the heartbeat on the running (home) loop."""
        loop = asyncio.get_running_loop()
        self._resync_wanted = asyncio.Event()
        self._tasks = [
            loop.create_task(self._listen(), name=f"mcp-cancellation-redis-listen-{self.worker}"),
            loop.create_task(
                self._heartbeat(), name=f"mcp-cancellation-redis-heartbeat-{self.worker}"
            ),
        ]

    async def stop(self) -> None:
        """Stop both loops (redis-py may turn a cancellation into a connection error: the
        loops also stop on the home loop's closed flag, and are cancelled until done)."""
        tasks, self._tasks = self._tasks, []
        while tasks:
            for task in tasks:
                task.cancel()
            _, pending = await asyncio.wait(tasks, timeout=0.1)
            tasks = list(pending)

    def maintenance(self) -> asyncio.Lock:
        """Serialises cleanup and resync, which both release owed rows (on the home loop,
        so one lock suffices); otherwise one could release rows the other then counts."""
        if self._maintenance_lock is None:
            self._maintenance_lock = asyncio.Lock()
        return self._maintenance_lock

    def want_resync(self) -> None:
        """Ask the heartbeat for a resync (from any thread)."""
        self._home.soon(self._resync_wanted.set)

    # -- listener ----------------------------------------------------------------------

    def deliver(self, data: bytes | str) -> None:
        """Flip the tokens named by one pushed message."""
        try:
            fields = split_netstrings(to_bytes(data))
            scope, key, reason = text(fields[0]), text(fields[1]), decode_reason(fields[2])
        except (ValueError, IndexError):
            logger.warning("ignoring a malformed cancellation message")
            return
        owners = {text(owner) for owner in fields[3:]}
        for token in self._local.tokens(scope, key, owners):
            token.set_cancelled(reason)

    async def _listen(self) -> None:
        channel = self._prefix + b"c:" + to_bytes(self.worker)
        delay = self._backoff[0]
        timeout = self._home.timeout
        # A connection that silently died (a partition, no RST) never errors: ping it and
        # reconnect when nothing, not even the pong, came back in time.
        ping_every = min(self.heartbeat_ttl / 3, 10.0)
        loop = asyncio.get_running_loop()
        subscription = self._subscription
        while not self._home.closed:
            pubsub: PubSub | None = None
            try:
                async with asyncio.timeout(timeout):
                    pubsub = await subscription.open(channel)
                last_seen = next_ping = loop.time()
                while True:
                    message = await pubsub.get_message(timeout=min(1.0, ping_every))
                    reraise_cancellation()  # redis-py may swallow a cancellation
                    now = loop.time()
                    if now >= next_ping:
                        next_ping = now + ping_every
                        async with asyncio.timeout(timeout):
                            await pubsub.ping()
                    if message is None:
                        if now - last_seen > ping_every + timeout:
                            raise TimeoutError("no answer on the pub/sub connection")
                        continue
                    last_seen = now
                    kind = text(message["type"])
                    if kind == subscription.confirmation:
                        self.subscribed = True
                        self._home.health.answered()
                        delay = self._backoff[0]
                        self._resync_wanted.set()  # messages may have been missed
                    elif kind == subscription.message:
                        self.deliver(message["data"])
                    elif kind == subscription.lost:
                        raise ConnectionError("the server dropped the subscription")
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # any failure: reconnect with backoff, never die
                reraise_cancellation()
                self._home.health.failed("subscribe", exc)
                if self.subscribed:
                    logger.warning("Redis pub/sub connection lost: %s", exc)
                self.subscribed = False
            finally:
                self.subscribed = False
                if pubsub is not None:
                    with contextlib.suppress(Exception):
                        async with asyncio.timeout(timeout):
                            # (Any: redis-py types aclose() from 8.2 on, not before)
                            await cast(Any, pubsub).aclose()
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(timeout):
                        await subscription.close()
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._backoff[1])

    # -- heartbeat ---------------------------------------------------------------------

    async def _heartbeat(self) -> None:
        interval = self.heartbeat_ttl / 3
        heartbeat_key = self._prefix + b"hb:" + to_bytes(self.worker)
        while not self._home.closed:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await self._resync_wanted.wait()
            reraise_cancellation()
            wanted = self._resync_wanted.is_set()
            self._resync_wanted.clear()
            try:
                previous = await self._home.call(
                    lambda: self._client.set(
                        heartbeat_key, b"1", px=int(self.heartbeat_ms), get=True
                    ),
                    "heartbeat",
                )
                if wanted or previous is None or self._local.owes_releases:
                    await self._resync_entry()
            except StorageUnavailable as exc:
                reraise_cancellation()
                logger.debug("heartbeat failed: %s", exc)
                if wanted:
                    self._resync_wanted.set()
                    await asyncio.sleep(min(self._backoff[1], interval))
            except Exception:
                reraise_cancellation()
                logger.exception("Redis heartbeat failed")

    # -- resync ------------------------------------------------------------------------

    async def resync(self) -> int:
        """Re-track this worker's rows in Redis and flip the tokens of those cancelled
        meanwhile (one round trip); release owed rows. Returns the tokens flipped."""
        return await self._home.at_home(self._resync)

    async def _resync(self) -> int:
        async with self.maintenance():
            # The snapshot's rows are held until the script has run: a request that ends
            # meanwhile releases its row after the script re-tracked it, not before.
            snapshot = self._local.begin_resync()
            try:
                orphans = self._local.orphans()
                args: list[bytes | str | int] = [
                    self.worker,
                    self.heartbeat_ms,
                    str(len(snapshot)),
                ]
                for scope, key, owner, _ in snapshot:
                    args += [to_bytes(scope), to_bytes(key), to_bytes(owner)]
                for scope, key, owner in orphans:
                    args += [to_bytes(scope), to_bytes(key), to_bytes(owner)]
                reasons: Sequence[Any] = await self._home.call(
                    lambda: self._run_script("RESYNC", *args), "resync"
                )
                # Rows dropped here meanwhile without waiting for this resync (a track or
                # an untrack cut short): the script may have re-tracked them. (Read before
                # the held rows go, whose releases now follow the script.)
                gone = self._local.finished_since(snapshot)
            finally:
                self._local.end_resync()
            self._local.released(orphans)
            self._local.orphan(gone)
            flipped = 0
            for (_, _, _, token), value in zip(snapshot, reasons, strict=False):
                if value is not None and not token.cancelled:
                    token.set_cancelled(decode_reason(value))
                    flipped += 1
            if gone:
                self._resync_wanted.set()
            await self._clear_owed()
            return flipped

    async def _clear_owed(self) -> None:
        """Remove the cancellation rows that failed finishes left, after the re-tracking
        (a request of this worker with the same id, in flight again, keeps its row), in
        batches of :data:`CLEAR_BATCH`, so that no script runs long."""
        owed = self._local.owed_clears()
        for start in range(0, len(owed), CLEAR_BATCH):
            batch = owed[start : start + CLEAR_BATCH]
            args: list[bytes | str | int] = []
            for scope, key in batch:
                args += [to_bytes(scope), to_bytes(key)]
            await self._home.call(functools.partial(self._run_script, "CLEAR", *args), "resync")
            self._local.cleared(batch)
