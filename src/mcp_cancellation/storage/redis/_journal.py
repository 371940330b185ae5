"""This worker's in-flight requests and the writes it owes Redis (private).

The *tokens* of its owners (what a pushed cancellation flips), and the *queue* of their
tracks and releases, sent by one background task in one ``SYNC`` per moment, retried with
backoff until Redis takes them; a request waits for its write at most ``wait``. A call is
*young* until it has run for ``delay``: it is tracked only then (one timer for them all),
or at once when a cancellation *seeks* it, so that a short call costs Redis nothing. A
*resync* sends the worker's whole state instead. docs/architecture.md, "The Redis table",
has the protocol (the worker's state, and what each event does).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

from ..._errors import StorageUnavailable
from ..._extras import requires
from .._in_flight import InFlightTokens, OwnerKey
from ._codec import netstring
from ._contracts import SyncCall, SyncOp, SyncReply
from ._home import HomeLoop
from ._table import Table

with requires("redis", "RedisStorage"):
    from redis.exceptions import ResponseError

if TYPE_CHECKING:
    from ..._token import RequestToken

__all__ = ["Journal"]

logger = logging.getLogger("mcp_cancellation.redis")

#: Operations one ``SYNC`` call carries at most (a few milliseconds of Redis time).
BATCH = 256
#: Pending rows this worker remembers (:meth:`Journal.sought`); past it, the oldest is
#: forgotten, and a call of its request is tracked at its delay, not at its start.
PENDING_KEPT = 65_536
#: How long a seek of a waiting cancellation makes a call of its request that starts
#: here tracked at its start (seconds): longer than the registry's default track_wait
#: (0.5 s) and the margin a waiting cancellation lives by (``WAIT_MARGIN``, 1 s).
SEEK_KEPT = 2.0
#: Scopes one call marks as recovering at most; past it, the whole table.
RECOVERING_SCOPES = 64
#: The longest a write nobody waits for (the track of a call that came of age, the end
#: of one that was not cancelled, a dead owner's sweep) waits for others to share its
#: ``SYNC`` (seconds): long calls then cost Redis a fraction of a script call each.
LINGER = 0.1
#: The same for the end of a call that was not cancelled, and a dead owner's sweep: it
#: only removes an owner (no later call can be reached by what it leaves meanwhile, and
#: an operator sees the call half a second longer).
LINGER_END = 0.5


class _Write:
    """One queued write: ``T`` track, ``U`` untrack, ``S`` sweep (a dead owner's: the
    row goes if no owner is left), ``F`` finish (untrack and clear). One that is not
    *urgent* (nobody waits for it) may linger (``LINGER``, ``LINGER_END`` for an end), so
    that more share its
    ``SYNC``."""

    __slots__ = ("done", "linger", "op", "queued_at", "row", "token", "urgent")

    def __init__(
        self, op: str, row: OwnerKey, token: RequestToken | None = None, *, urgent: bool = True
    ) -> None:
        self.op = op
        self.row = row
        self.token = token
        self.urgent = urgent
        #: How long it may wait for others, when it is not urgent (seconds).
        self.linger = LINGER_END if op in ("F", "S") else LINGER
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

    #: The table: its home loop, its scripts and its prefix.
    table: Table
    heartbeat_ms: str
    #: How long, after this worker saw Redis fail, its calls mark the table as recovering
    #: (``P recovering``: cancellations of ids not in flight are refused meanwhile).
    grace: float
    #: Tells the other workers that Redis refuses this worker's writes.
    announce_refusal: Callable[[], Awaitable[None]]
    wait: float
    backoff: tuple[float, float]
    worker: str = ""  # set by the storage before the first call
    #: The table's layout, '<partition>/<partitions>' (kept in ``P layout``).
    layout: str = "0/1"
    #: Called after each resync (the task table has its running tasks claimed again).
    resynced: Callable[[], None] = lambda: None
    #: A call is tracked in Redis once it has run this long (seconds; 0: at its start).
    delay: float = 0.0
    #: Whether the subscription that hears the seeks is still the one that was heard
    #: (its connection open, not replaced by a reconnection): asked as each call starts,
    #: so that a drop the listener has not noticed yet never lets a call stay young.
    ear: Callable[[], bool] = lambda: True

    @property
    def home(self) -> HomeLoop:
        return self.table.home

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._tokens = InFlightTokens()
        self._queue: list[_Write] = []
        # Each owner's sequence, once Redis has taken its track (before that, it is in
        # flight here and unknown there).
        self._sequences: dict[OwnerKey, int] = {}
        # The latest mark pushed for each (scope, key) while one of its owners here had
        # no sequence yet: (sequence, reason, method); decided when that owner's
        # sequence arrives (:meth:`_learn`), never guessed.
        self._undecided: dict[tuple[str, str], tuple[int, str | None, str | None]] = {}
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._quiet: asyncio.Event | None = None
        self._resync_wanted = False
        self._resync_waiters: list[asyncio.Future[int]] = []
        self._waiting: list[_Write] = []  # writes whose caller waits for them
        self._expiry: asyncio.TimerHandle | None = None
        # The young calls, oldest first: row -> (loop time of its start, token); one timer
        # (_due) tracks each once it is `delay` old.
        self._young: OrderedDict[OwnerKey, tuple[float, RequestToken]] = OrderedDict()
        self._due: asyncio.TimerHandle | None = None
        # Requests a cancellation waits for, as the seeks told: a pending row (no
        # expiry) or a waiting cancellation (until the loop time given). A hint: a call
        # of one is tracked at its start, and claims it; a stale entry costs one track.
        self._pending: OrderedDict[tuple[str, str], float | None] = OrderedDict()
        self._flush_now = False  # a reader or close() wants the queue sent at once
        # Whether the listener hears the seeks: only then may a call stay young.
        self._hearing = False
        self._beat = False
        #: The table's epoch as this worker last synchronised with it ('' before).
        self.epoch = ""
        #: Resyncs finished (for health checks and tests).
        self.resyncs = 0

    @property
    def grace_ms(self) -> str:
        return str(int(1000 * self.grace))

    def recovering(self) -> bytes:
        """What this worker's calls mark as recovering (``P recovering``): nothing
        (``b""``) unless a call of it failed within the grace period; then the whole
        table (``b"*"``), or, when the call only timed out (a stall: its writes are still
        queued, and go first when Redis answers), the scopes of its queued tracks alone
        (netstrings), so that one caller's flood that slows this worker never makes
        another caller's cancellations wait."""
        health = self.home.health
        if not health.failed_within(self.grace):
            return b""
        if not health.stalled or self._resync_wanted:
            return b"*"
        scopes = {write.row[0] for write in self._queue if write.op == "T"}
        if len(scopes) > RECOVERING_SCOPES:
            return b"*"
        return b"".join(netstring(scope) for scope in sorted(scopes))

    # -- the token table ---------------------------------------------------------------

    def tokens(self, scope: str, key: str) -> list[RequestToken]:
        """The tokens of this worker's owners of ``(scope, key)``."""
        with self._lock:
            return self._tokens.tokens(scope, key)

    def pushed(
        self, scope: str, key: str, sequence: int, reason: str | None, method: str | None
    ) -> list[RequestToken]:
        """The tokens a cancellation pushed with the mark *sequence* reaches now: this
        worker's owners of ``(scope, key)`` tracked at or before it. An owner whose track
        Redis has not answered yet is decided when the answer brings its sequence (the
        mark is kept until then): a push applied late never reaches an owner tracked
        after the mark."""
        sequences = self._sequences
        reached: list[RequestToken] = []
        with self._lock:
            for owner, token in self._tokens.owners(scope, key):
                known = sequences.get((scope, key, owner))
                if known is None:
                    kept = self._undecided.get((scope, key))
                    if kept is None or kept[0] < sequence:
                        self._undecided[(scope, key)] = (sequence, reason, method)
                elif known <= sequence:
                    reached.append(token)
        return reached

    def holds(self, scope: str, key: str) -> bool:
        """Whether a request of ``(scope, key)`` is in flight in this worker."""
        with self._lock:
            return (scope, key) in self._tokens

    def sweep(self, dead: Collection[str]) -> list[OwnerKey]:
        """Forget the rows of *dead* owners and queue their release; the rows."""
        with self._lock:
            rows = self._tokens.sweep(dead)
            sent = []
            for row in rows:
                self._sequences.pop(row, None)
                if (row[0], row[1]) in self._undecided and self._all_known(row[0], row[1]):
                    del self._undecided[(row[0], row[1])]
                if self._young.pop(row, None) is None:
                    sent.append(row)
        for row in sent:
            self._put(_Write("S", row, urgent=False))
        return rows

    # -- writes --------------------------------------------------------------------------

    async def track(self, row: OwnerKey, token: RequestToken) -> None:
        """Hold *token* here; then, for a young call, start its timer (nothing goes to
        Redis yet), else queue its track and wait for it at most :attr:`wait` (a call of
        a request with a pending row is tracked at once: it claims the row and starts
        cancelled)."""
        request = (row[0], row[1])
        if self.hearing and not self.ear():
            self.hear_seeks(False)  # (a seek sent since may be lost: track them all)
        with self._lock:
            self._tokens.add(*row, token)
            young = self.hearing and not token.at_start
            if young and request in self._pending:
                expires = self._pending.pop(request)
                young = expires is not None and expires < asyncio.get_running_loop().time()
            if young:
                started = asyncio.get_running_loop().time()
                self._young[row] = (started, token)
        if young:
            if self._due is None:
                loop = asyncio.get_running_loop()
                self._due = loop.call_at(started + self.delay, self._track_due)
            return
        write = _Write("T", row, token)
        self._put(write)
        try:
            await self._wait(write)
        except BaseException:  # cancelled while waiting: the request never started
            self.release(row, "U")
            raise

    async def finish(self, row: OwnerKey, op: str) -> None:
        """:meth:`release`, waiting for Redis at most :attr:`wait` (it rides with the next
        track, or goes at once; a cancelled wait leaves it queued). A young call's end
        sends nothing and waits for nothing; the end (``F``) of a call that was not
        cancelled waits for nothing either, and lingers to share a ``SYNC``: no row of
        its request can reach a later call (see docs/architecture.md)."""
        write = self.release(row, op)
        if write is not None and write.urgent:
            await self._wait(write)

    def release(self, row: OwnerKey, op: str) -> _Write | None:
        """Forget *row* here and queue its release (``U``, ``S`` or ``F``); nothing for a
        young call, which Redis never saw (unless a pending row of its request may wait
        there: the end of a call clears its cancellation)."""
        request = (row[0], row[1])
        with self._lock:
            owners = self._tokens.owners(*request)
            token = next((t for owner, t in owners if owner == row[2]), None)
            self._tokens.discard(*row)
            self._sequences.pop(row, None)
            if request in self._undecided and self._all_known(*request):
                del self._undecided[request]
            young = self._young.pop(row, None) is not None
            # (a pending row's hint: its row may wait in Redis, and the end clears it)
            row_hinted = request in self._pending and self._pending[request] is None
        if young and not row_hinted:
            return None
        # (With no delay every write goes at once, as a table tracked at each start
        # expects: an ended call leaves no owner behind for another worker to see.)
        calm = self.delay > 0 and op == "F" and token is not None and not token.cancelled
        write = _Write(op, row, urgent=not calm)
        self._put(write)
        return write

    # -- young calls ---------------------------------------------------------------------

    def _track_due(self) -> None:
        """The timer: queue the tracks of the calls that are now :attr:`delay` old (one
        ``SYNC`` carries them), and run again for the next."""
        self._due = None
        loop = asyncio.get_running_loop()
        # (A timer may fire up to the clock's resolution early.)
        limit = loop.time() - self.delay + 0.001
        due: list[_Write] = []
        with self._lock:
            young = self._young
            while young:
                row, (started, token) = next(iter(young.items()))
                if started > limit:
                    self._due = loop.call_at(started + self.delay, self._track_due)
                    break
                young.popitem(last=False)
                due.append(_Write("T", row, token, urgent=False))
        for write in due:
            self._put(write)

    def promote(self, scope: str, key: str) -> list[_Write]:
        """Queue the tracks of this worker's young calls of ``(scope, key)`` now (a
        cancellation seeks them); the writes."""
        with self._lock:
            owners = self._tokens.owners(scope, key) if self._young else []
            rows = [(scope, key, owner) for owner, _ in owners]
            found = [(row, self._young.pop(row)) for row in rows if row in self._young]
        writes = [_Write("T", row, token) for row, (_, token) in found]
        for write in writes:
            self._put(write)
        # A track the timer queued may still linger: it is urgent now.
        lingering = [
            w
            for w in self._queue
            if not w.urgent and w.op == "T" and w.row[0] == scope and w.row[1] == key
        ]
        for write in lingering:
            write.urgent = True
        if lingering:
            self._kick()
        return writes + lingering

    async def promoted(self, scope: str, key: str) -> None:
        """:meth:`promote`, and wait for the tracks at most :attr:`wait` (a cancellation
        recorded here then binds to the calls it stops, never leaving a pending row that
        a later call of the id would claim)."""
        for write in self.promote(scope, key):
            await self._wait(write)

    @property
    def hearing(self) -> bool:
        """Whether calls stay young (see :meth:`hear_seeks`)."""
        return self._hearing and self.delay > 0

    def hear_seeks(self, hearing: bool) -> None:
        """The listener hears the seeks from now on, or no longer (on the home loop).
        Only a worker that hears them keeps calls young: one that stops hearing them
        tracks its young calls at once, and each new call at its start, until it hears
        them again (a seek it missed would leave a young call unfound)."""
        self._hearing = hearing
        if hearing or self.home.closed:
            return
        with self._lock:
            young, self._young = self._young, OrderedDict()
        for row, (_, token) in young.items():
            self._put(_Write("T", row, token))

    def sought(self, scope: str, key: str, pending: bool) -> None:
        """A cancellation seeks ``(scope, key)`` (a message on ``P seek``): track its young
        calls now, and remember that a cancellation waits for its next call: a pending
        row (*pending*), or a waiting cancellation, for ``SEEK_KEPT`` seconds (a call
        that starts meanwhile, its HTTP request on its way when the seek came, is then
        tracked at its start and claims it)."""
        if pending:
            self.remember_pending([(scope, key)])
        else:
            expires = asyncio.get_running_loop().time() + SEEK_KEPT
            self.remember_pending([(scope, key)], expires)
        self.promote(scope, key)

    def remember_pending(
        self, requests: Sequence[tuple[str, str]], expires: float | None = None
    ) -> None:
        """Keep *requests* as awaited by a cancellation, until the loop time *expires*
        (``None``: until a call of it claims it), at most ``PENDING_KEPT``."""
        if self.delay <= 0:
            return
        with self._lock:
            pending = self._pending
            for request in requests:
                if expires is not None and pending.get(request, 0.0) is None:
                    continue  # (a pending row's hint outlives a waiting one's)
                pending[request] = expires
                pending.move_to_end(request)
            while len(pending) > PENDING_KEPT:
                pending.popitem(last=False)

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
        write.queued_at = asyncio.get_running_loop().time()
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
        self._flush_now = True
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
        if self._due is not None:
            self._due.cancel()
            self._due = None
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
            if not (self._resync_wanted or self._beat or self._flush_now) and not any(
                write.urgent for write in self._queue[:BATCH]
            ):
                # Nobody waits for these writes: let more join them, each for at most its
                # linger.
                due = min(write.queued_at + write.linger for write in self._queue[:BATCH])
                linger = due - loop.time()
                if linger > 0:
                    self._wake.clear()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(linger):
                            await self._wake.wait()
                    continue
            self._flush_now = False
            # Whatever queued while the last call was on its way goes in this one: under
            # load, the tracks and releases of many requests share a round trip.
            # The backoff counts from the start of an attempt: after a call that waited
            # out its timeout (a stall) the next one goes at once, so a write is always
            # waiting in Redis when it answers again.
            started = loop.time()
            try:
                if self._resync_wanted:
                    await self._resync()
                else:
                    await self._flush()
            except Exception as exc:  # never die: every later write depends on this task
                if not isinstance(exc, StorageUnavailable):
                    logger.exception("sending this worker's in-flight rows to Redis failed")
                elif isinstance(exc.__cause__, ResponseError):
                    await self.announce_refusal()  # Redis answers, and refuses: tell others
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
        tracks = [write for write in batch if write.op == "T"]
        self._learn(tracks, reply)
        for write, tracked in zip(tracks, reply.tracks, strict=True):
            if tracked.claim is not None and write.token is not None:
                write.token._cancel(tracked.claim.reason)
        for write in batch:
            write.settle()
        if reply.lost or reply.beat_missing:
            # The table this worker knew is gone, or its heartbeat lapsed (another
            # worker's cleanup may have swept its rows): put everything back.
            self._resync_wanted = True

    async def _resync(self) -> int:
        self._resync_wanted = False
        self._beat = False
        with self._lock:
            young = self._young
            snapshot = [row for row in self._tokens.rows() if row[:3] not in young]
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
        self.epoch = reply.epoch
        self._learn(writes[: len(snapshot)], reply)
        flipped = 0
        for (_, _, _, token), tracked in zip(snapshot, reply.tracks, strict=True):
            if tracked.claim is not None and not token.cancelled:
                token._cancel(tracked.claim.reason)
                flipped += 1
        self.resyncs += 1
        self.resynced()
        stale = reply.stale
        if stale:
            logger.info("released %d in-flight row(s) Redis held for this worker", stale)
        waiters, self._resync_waiters = self._resync_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(flipped)
        return flipped

    def _learn(self, tracks: Sequence[_Write], reply: SyncReply) -> None:
        """Keep the sequence Redis gave each track whose owner is still in flight here,
        and decide the marks pushed before it arrived: one at or after the owner's
        sequence reaches it."""
        flips: list[tuple[RequestToken, str | None, str | None]] = []
        with self._lock:
            for write, tracked in zip(tracks, reply.tracks, strict=True):
                if self._tokens.holds(*write.row):
                    self._sequences[write.row] = tracked.sequence
                    scope, key, _ = write.row
                    kept = self._undecided.get((scope, key))
                    if kept is not None and tracked.sequence <= kept[0] and write.token:
                        flips.append((write.token, kept[1], kept[2]))
            for scope, key in {(w.row[0], w.row[1]) for w in tracks}:
                if (scope, key) in self._undecided and self._all_known(scope, key):
                    del self._undecided[(scope, key)]
        for token, reason, method in flips:
            token._cancel(reason, method)

    def _all_known(self, scope: str, key: str) -> bool:
        """Whether every owner of ``(scope, key)`` here has its sequence (under the lock)."""
        return all(
            (scope, key, owner) in self._sequences for owner, _ in self._tokens.owners(scope, key)
        )

    def _fail_resync_waiters(self, error: StorageUnavailable) -> None:
        waiters, self._resync_waiters = self._resync_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_exception(error)

    async def _send(self, writes: Sequence[_Write], *, full: bool, operation: str) -> SyncReply:
        def call() -> Awaitable[Any]:
            # The ages are taken now, as the call goes out (after any wait for a
            # connection), for the operators' view of when each request started.
            now = time.monotonic()
            sync = SyncCall(
                worker=self.worker,
                beat_ms=self.heartbeat_ms,
                epoch=self.epoch,
                grace_ms=self.grace_ms,
                full=full,
                recovering=self.recovering(),
                layout=self.layout,
                ops=[_op(write, now) for write in writes],
            )
            return self.table.scripts.run("SYNC", sync.argv(self.table.keys.prefix))

        reply = SyncReply.decode(await self.home.call(call, operation))
        if not self.epoch:
            self.epoch = reply.epoch
        return reply


def _op(write: _Write, now: float) -> SyncOp:
    scope, key, owner = write.row
    token = write.token
    if token is None:
        return SyncOp(write.op, scope, key, owner)
    age = int(1_000_000 * (now - token.started))
    return SyncOp(write.op, scope, key, owner, age, token.tool)
