"""This worker's in-flight requests and the writes it owes Redis (private).

Every track and release is put in a queue that one background task sends to Redis, all
those of the same moment in one ``SYNC`` script call (one round trip, however many
requests start or end together). A request waits for its own write at most ``wait``
seconds: a Redis that stalls or refuses never holds a call longer, and the call runs
cancellable in this worker meanwhile. A write that fails stays queued, in order, and is
sent again with backoff until Redis takes it; every write is idempotent, so a batch that
failed half-way is simply sent again.

A *resync* sends this worker's whole state instead: a track of every request it has in
flight (Redis answers which of them were cancelled meanwhile), the queued releases, and a
release of every in-flight row Redis holds for this worker beyond those (a write lost
with the table, or rows a failover brought back). It runs after every (re)subscription,
when the heartbeat was found missing, when the table's epoch changed (the table was lost)
and when another worker found it lost.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

from ..._extras import requires
from ...errors import StorageUnavailable
from .._in_flight import InFlightTokens, Row
from ._codec import decode_reason, text, to_bytes
from ._home import HomeLoop

with requires("redis", "RedisStorage"):
    from redis.exceptions import ResponseError

if TYPE_CHECKING:
    from ...token import RequestToken

__all__ = ["Journal"]

logger = logging.getLogger("mcp_cancellation.redis")

#: Operations one ``SYNC`` call carries at most (a few milliseconds of Redis time).
BATCH = 256

RunScript = Callable[..., Awaitable[Any]]


class _Reply:
    """A ``SYNC`` reply, indexable as the script returned it, with :attr:`reasons`: one
    per ``T``, a cancellation the track claimed or ``None``."""

    __slots__ = ("_reply", "reasons")

    def __init__(self, reply: list[Any], round_trip: float) -> None:
        self._reply = reply
        # {µs after the miss, reason}: the request's start as Redis saw it came after a
        # cancellation that found it not in flight; the track was in transit for at most
        # this call's round trip, so a start within it may have preceded the miss: claim
        # it (losing no cancellation), and leave any later one alone.
        limit = round_trip * 1_000_000
        self.reasons = [
            (v[1] if int(v[0]) <= limit else None) if isinstance(v, list) else v
            for v in reply[3:-1]
        ]

    def __getitem__(self, index: int) -> Any:
        return self._reply[index]


class _Write:
    """One queued write: ``T`` track, ``U`` untrack, ``R`` release (a dead owner's: the
    row goes if no owner is left), ``F`` finish (untrack and clear)."""

    __slots__ = ("done", "op", "queued_at", "row", "token")

    def __init__(self, op: str, row: Row, token: RequestToken | None = None) -> None:
        self.op = op
        self.row = row
        self.token = token
        #: Set when Redis took the write, or when its waiter stops waiting.
        self.done: asyncio.Future[None] | None = None
        self.queued_at = 0.0

    def settle(self) -> None:
        """Let its waiter, if any, go on."""
        if self.done is not None and not self.done.done():
            self.done.set_result(None)


@dataclasses.dataclass(eq=False, repr=False, kw_only=True)
class Journal:
    """The tokens this worker flips and the queue of writes it owes Redis (see the module
    docstring). The token table is safe from any thread; the queue lives on the home loop."""

    home: HomeLoop
    run_script: RunScript
    #: The storage's public resync(), which calls resync().
    storage_resync: Callable[[], Awaitable[int]]
    heartbeat_ms: str
    grace_ms: str
    recovering: Callable[[], bool]
    refused: Callable[[], Awaitable[None]]
    wait: float
    backoff: tuple[float, float]
    worker: str = ""  # set by the storage before the first call
    #: The table's layout, '<partition>/<partitions>' (kept in ``P layout``).
    layout: str = "0/1"

    @property
    def started(self) -> bool:
        """Whether this worker has sent Redis anything of its own (a track, a release)."""
        return self._task is not None

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._tokens = InFlightTokens()
        self._queue: list[_Write] = []
        # Rows whose track Redis has not taken yet: in flight here, unknown there.
        self._unsent: set[Row] = set()
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._quiet: asyncio.Event | None = None
        self._resync_wanted = False
        self._resync_waiters: list[asyncio.Future[int]] = []
        self._waiting: list[_Write] = []  # writes whose caller waits for them
        self._expiry: asyncio.TimerHandle | None = None
        self._beat = False
        #: The table's epoch as this worker last synchronised with it ('' before).
        self.epoch = ""
        self._seen = 0  # the latest Redis time (µs) a reply told this worker
        #: Per request in flight: the latest Redis time (µs) this worker knew as it
        #: started (its tracks carry it, on a resync too; see saw()).
        self._floors: dict[Row, int] = {}

    # -- the token table ---------------------------------------------------------------

    def tokens(
        self, scope: str, key: str, only: Collection[str] | None = None
    ) -> list[RequestToken]:
        with self._lock:
            return self._tokens.tokens(scope, key, only)

    def pushed(self, scope: str, key: str, owners: Collection[str]) -> list[RequestToken]:
        """The tokens a pushed cancellation of *owners* reaches: theirs, and those of this
        worker's requests of ``(scope, key)`` whose track Redis has not taken yet (in
        flight when the cancellation was recorded, which Redis could not know)."""
        with self._lock:
            unsent = {o for s, k, o in self._unsent if s == scope and k == key}
            return self._tokens.tokens(scope, key, {*owners, *unsent})

    def holds(self, scope: str, key: str) -> bool:
        """Whether a request of ``(scope, key)`` is in flight in this worker."""
        with self._lock:
            return (scope, key) in self._tokens

    def sweep(self, dead: Collection[str]) -> list[Row]:
        """Forget the rows of *dead* owners and queue their release; the rows."""
        with self._lock:
            rows = self._tokens.sweep(dead)
            for row in rows:
                self._floors.pop(row, None)
        for row in rows:
            self._put(_Write("R", row))
        return rows

    def saw(self, redis_us: int) -> None:
        """Redis's clock read *redis_us* (µs) before now: a cancellation that missed its
        request then cannot claim a request this worker starts from now on."""
        self._seen = max(self._seen, redis_us)

    # -- writes --------------------------------------------------------------------------

    async def track(self, row: Row, token: RequestToken) -> None:
        """Hold *token* here and queue its track; wait for it at most :attr:`wait`."""
        with self._lock:
            self._tokens.add(*row, token)
            self._unsent.add(row)
            if self._seen:
                self._floors[row] = self._seen
        write = _Write("T", row, token)
        self._put(write)
        try:
            await self._wait(write)
        except BaseException:  # cancelled while waiting: the request never started
            self.release(row, "U")
            raise

    async def finish(self, row: Row, op: str) -> None:
        """:meth:`release`, waiting for Redis at most :attr:`wait` (it rides with the next
        track, or goes at once; a cancelled wait leaves it queued)."""
        await self._wait(self.release(row, op))

    def release(self, row: Row, op: str) -> _Write:
        """Forget *row* here and queue its release (``U``, ``R`` or ``F``)."""
        with self._lock:
            self._tokens.discard(*row)
            self._unsent.discard(row)
            self._floors.pop(row, None)
        write = _Write(op, row)
        self._put(write)
        return write

    async def _wait(self, write: _Write) -> None:
        """Until Redis took *write*, or :attr:`wait` has passed (one timer serves every
        waiter: :meth:`_expire_waits`). A cancelled wait leaves the write queued."""
        loop = asyncio.get_running_loop()
        write.done = loop.create_future()
        write.queued_at = loop.time()
        self._waiting.append(write)
        if self._expiry is None:
            self._expiry = loop.call_later(self.wait, self._expire_waits)
        await write.done

    def _expire_waits(self) -> None:
        """Let go of the waiters that have waited :attr:`wait` (their writes stay queued:
        sent when Redis answers); run again while any is left."""
        self._expiry = None
        loop = asyncio.get_running_loop()
        limit = loop.time() - self.wait
        waiting = [w for w in self._waiting if w.done is not None and not w.done.done()]
        for write in waiting:
            if write.queued_at <= limit:
                write.settle()
        self._waiting = [w for w in waiting if not w.done or not w.done.done()]
        if self._waiting:
            first = min(w.queued_at for w in self._waiting)
            self._expiry = loop.call_at(first + self.wait, self._expire_waits)

    def _put(self, write: _Write) -> None:
        self._queue.append(write)
        self._kick()

    def _kick(self) -> None:
        """Wake the background task."""
        if self._wake is None:
            self._start()
        assert self._wake is not None
        assert self._quiet is not None
        self._quiet.clear()
        self._wake.set()

    def _start(self) -> None:
        loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._quiet = asyncio.Event()
        name = f"mcp-cancellation-redis-sync-{self.worker}"
        self._task = loop.create_task(self._run(), name=name)

    def want_resync(self) -> None:
        """Ask for a resync (on the home loop)."""
        self._resync_wanted = True
        self._kick()

    def heartbeat(self) -> None:
        """Refresh the heartbeat (and check the epoch) with the next call, an empty one
        when nothing else is queued (on the home loop)."""
        self._beat = True
        self._kick()

    async def settle(self, within: float) -> None:
        """Wait until the queue is sent, or Redis failed it, for at most *within* seconds:
        a read of this worker then sees its own writes."""
        if self._quiet is None or self._quiet.is_set():
            return
        self._kick()
        try:
            async with asyncio.timeout(within):
                await self._quiet.wait()
        except TimeoutError:
            pass

    async def resync(self) -> int:
        """Run a resync now (from the background task) or have it run and wait for it;
        returns the tokens it flipped. Raises ``StorageUnavailable`` if it failed."""
        if self._task is not None and asyncio.current_task() is self._task:
            return await self._resync()
        waiter: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._resync_waiters.append(waiter)
        self.want_resync()
        return await waiter

    async def close(self, within: float) -> None:
        """Send what is queued (for at most *within* seconds), then stop the task."""
        await self.settle(within)
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait([task])
        for waiter in self._resync_waiters:
            if not waiter.done():
                waiter.set_exception(StorageUnavailable("the Redis storage is closed"))
        self._resync_waiters.clear()

    # -- the background task -------------------------------------------------------------

    async def _run(self) -> None:
        assert self._wake is not None
        assert self._quiet is not None
        loop = asyncio.get_running_loop()
        delay = self.backoff[0]
        while not self.home.closed:
            if not (self._queue or self._resync_wanted or self._beat):
                self._quiet.set()
                self._wake.clear()
                await self._wake.wait()
                continue
            # Whatever queued while the last call was on its way goes in this one: under
            # load, the tracks and releases of many requests share a round trip.
            # The backoff counts from the start of an attempt: after a call that waited
            # out its timeout (a stall) the next one goes at once, so a write is always
            # waiting in Redis when it answers again.
            started = loop.time()
            try:
                if self._resync_wanted:
                    await self.storage_resync()
                else:
                    await self._flush()
            except Exception as exc:  # never die: every later write depends on this task
                if not isinstance(exc, StorageUnavailable):
                    logger.exception("sending this worker's in-flight rows to Redis failed")
                elif isinstance(exc.__cause__, ResponseError):
                    await self.refused()  # Redis answers, and refuses: tell the others
                self._quiet.set()  # a reader goes on: Redis will fail it too, or answer
                await asyncio.sleep(max(0.0, started + delay - loop.time()))
                delay = min(delay * 2, self.backoff[1])
                continue
            delay = self.backoff[0]

    async def _flush(self) -> None:
        self._beat = False
        batch = self._queue[:BATCH]
        op = "heartbeat" if not batch else "track" if batch[0].op == "T" else "finish"
        reply = await self._send(batch, full=False, operation=op)
        del self._queue[: len(batch)]
        reasons = iter(reply.reasons)
        with self._lock:
            self._unsent.difference_update(w.row for w in batch if w.op == "T")
        for write in batch:
            if write.op == "T":
                value = next(reasons)
                if value is not None and write.token is not None:
                    write.token._cancel(decode_reason(value))
            write.settle()
        if int(reply[1]) or int(reply[2]):
            # The table this worker knew is gone, or its heartbeat lapsed (another
            # worker's cleanup may have swept its rows): put everything back.
            self._resync_wanted = True

    async def _resync(self) -> int:
        self._resync_wanted = False
        self._beat = False
        with self._lock:
            snapshot = list(self._tokens.rows())
        queued = list(self._queue)
        writes = [_Write("T", (s, k, o), token) for s, k, o, token in snapshot]
        writes += [w for w in queued if w.op != "T"]  # tracks: in the snapshot if still held
        try:
            reply = await self._send(writes, full=True, operation="resync")
        except BaseException as exc:
            self._resync_wanted = True
            if isinstance(exc, StorageUnavailable):
                self._fail_resync_waiters(exc)
            raise
        sent = {id(w) for w in queued}
        self._queue = [w for w in self._queue if id(w) not in sent]
        for write in queued:
            write.settle()
        self.epoch = text(reply[0])
        with self._lock:
            self._unsent.difference_update((s, k, o) for s, k, o, _ in snapshot)
        flipped = 0
        for (_, _, _, token), value in zip(snapshot, reply.reasons, strict=True):
            if value is not None and not token.cancelled:
                token._cancel(decode_reason(value))
                flipped += 1
        stale = int(reply[-1])
        if stale:
            logger.info("released %d in-flight row(s) Redis held for this worker", stale)
        waiters, self._resync_waiters = self._resync_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(flipped)
        return flipped

    def _fail_resync_waiters(self, error: StorageUnavailable) -> None:
        waiters, self._resync_waiters = self._resync_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_exception(error)

    async def _send(self, writes: Sequence[_Write], *, full: bool, operation: str) -> Any:
        head: list[bytes | str] = [
            self.worker,
            self.heartbeat_ms,
            self.epoch,
            self.grace_ms,
            "1" if full else "0",
            "1" if self.recovering() else "0",
            self.layout,
        ]
        sent = 0.0

        def call() -> Awaitable[Any]:
            # The ages are taken now, as the call goes out (after any wait for a
            # connection): the track's time in transit is then at most the round trip.
            nonlocal sent
            sent = time.monotonic()
            return self.run_script("SYNC", *head, *self._operations(writes, sent))

        reply = await self.home.call(call, operation)
        if not self.epoch:
            self.epoch = text(reply[0])
        return _Reply(reply, time.monotonic() - sent)

    def _operations(self, writes: Sequence[_Write], now: float) -> list[bytes | str]:
        args: list[bytes | str] = []
        floors = self._floors
        for write in writes:
            scope, key, owner = write.row
            op = write.op
            token = write.token
            if token is not None:  # 'T<us>[,<floor>][:<tool>]' (see sync.lua)
                # (its start lets Redis tell whether a cancellation that found it not in
                # flight came after it started)
                op += str(max(0, int(1_000_000 * (now - token.started))))
                floor = floors.get(write.row)
                if floor:
                    op += f",{floor}"
                if token.tool:
                    op += ":" + token.tool
            args += [op, to_bytes(scope), to_bytes(key), to_bytes(owner)]
        return args
