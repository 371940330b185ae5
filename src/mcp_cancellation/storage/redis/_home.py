"""The home event loop of a Redis storage: where its calls run, how long they may take,
and which errors mean "Redis cannot answer right now".

A storage belongs to one loop, its *home*: the loop running when it is constructed, or
else the first loop that uses it. Calls made from another thread's event loop are
forwarded there (which must be running: otherwise they raise
:class:`~mcp_cancellation.StorageUnavailable` within the timeout).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from ..._errors import StorageUnavailable
from ..._extras import requires
from .._health import Health

with requires("redis", "RedisStorage"):
    from redis import exceptions as redis_errors

__all__ = ["UNAVAILABLE", "HomeLoop", "describe", "reraise_cancellation"]

T = TypeVar("T")

#: Errors that mean "Redis cannot serve this call": an outage, a stall, and any error Redis
#: answers (a missing permission, out of memory, a script error, a read-only replica).
#: All of them degrade the same way: requests are served, cancellations are refused (503)
#: and one log line names the cause.
#: (redis-py's cluster errors, ``RedisClusterException`` and its subclasses such as
#: ``SlotNotCoveredError``, are no ``RedisError``: a cluster with no reachable node would
#: otherwise escape as a 500.)
UNAVAILABLE: tuple[type[BaseException], ...] = (
    redis_errors.RedisError,
    redis_errors.RedisClusterException,
    TimeoutError,
    OSError,
)


#: Operations that only read: after Redis refused a write (an ACL user may read and not run
#: scripts; out of memory), their success does not end the outage, only a write's does.
READS = frozenset({"get", "is_tracked", "stats"})


def describe(exc: BaseException) -> str:
    """*exc* in one line, with its causes: redis-py raises some errors with no message
    (a TLS handshake against a plain port), whose cause says what happened."""
    parts: list[str] = []
    seen: BaseException | None = exc
    while seen is not None and len(parts) < 3:
        message = str(seen).strip()
        parts.append(f"{type(seen).__name__}: {message}" if message else type(seen).__name__)
        seen = seen.__cause__ or seen.__context__
    return " (caused by ".join(parts) + ")" * (len(parts) - 1)


def reraise_cancellation() -> None:
    """Re-raise a cancellation of the current task that a client library turned into an
    ordinary error (so background loops stop when told to)."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class HomeLoop:
    """Runs a storage's calls on its home loop, bounded by *timeout*, errors translated.

    *on_call* runs on the home loop before each call (the storage starts its background
    tasks there); *health* hears how each call went. With *concurrency*, at most that
    many calls run at once and the others wait their turn (within the timeout): for a
    client whose pool fails fast when it is exhausted (redis-py's cluster client) this
    gives the waiting pool of one server. *prepare* is awaited before each call: the
    cluster client's ``initialize()``, which returns at once when it has the slot map and
    otherwise fetches it first (see ``_cluster.py``).
    """

    def __init__(
        self,
        timeout: float,
        on_call: Callable[[], None],
        health: Health,
        concurrency: int | None = None,
        prepare: Callable[[], Awaitable[object]] | None = None,
    ) -> None:
        self.timeout = timeout
        self._concurrency = concurrency
        self._prepare = prepare
        self._gate: asyncio.Semaphore | None = None
        self._on_call = on_call
        self.health = health
        self.loop: asyncio.AbstractEventLoop | None = None
        with contextlib.suppress(RuntimeError):
            self.loop = asyncio.get_running_loop()
        self.closed = False

    async def call(self, fn: Callable[[], Awaitable[T]], operation: str) -> T:
        """Run *fn* (one storage *operation*) on the home loop, bounded by the timeout,
        translating errors."""
        loop = asyncio.get_running_loop()
        if self.closed:
            raise StorageUnavailable("the Redis storage is closed")
        if self.loop is None:
            self.loop = loop
        if loop is not self.loop:
            return await self._forward(fn, operation)
        self._on_call()
        # redis-py can swallow a cancellation of the calling task (it retries the command,
        # or turns the cancellation into a connection error): a request cancelled during a
        # call must still stop, so a cancel requested meanwhile is re-raised here.
        task = asyncio.current_task()
        cancelling = task.cancelling() if task is not None else 0
        try:
            async with asyncio.timeout(self.timeout):
                if self._prepare is not None:
                    await self._prepare()
                if self._concurrency is None:
                    result = await fn()
                else:
                    result = await self._gated(fn)
        except UNAVAILABLE as exc:
            if task is not None and task.cancelling() > cancelling:
                raise asyncio.CancelledError from exc
            error = StorageUnavailable(f"Redis unavailable: {describe(exc)}")
            self.health.refused = isinstance(exc, redis_errors.ResponseError)
            self.health.stalled = isinstance(exc, TimeoutError | redis_errors.TimeoutError)
            self.health.failed(operation, error)
            raise error from exc
        if operation not in READS or not self.health.refused:
            self.health.answered()
        if task is not None and task.cancelling() > cancelling:
            raise asyncio.CancelledError
        return result

    async def _gated(self, fn: Callable[[], Awaitable[T]]) -> T:
        """*fn* with at most *concurrency* calls at once; a pool that still finds no free
        connection (redis-py's cluster pool raises at once) is tried again shortly, so a
        burst waits within the timeout as a blocking pool would."""
        if self._gate is None:
            self._gate = asyncio.Semaphore(self._concurrency or 1)
        while True:
            async with self._gate:
                try:
                    return await fn()
                except redis_errors.MaxConnectionsError:
                    pass
            await asyncio.sleep(0.005)

    async def _forward(self, fn: Callable[[], Awaitable[T]], operation: str) -> T:
        home = self._running_home()

        async def run() -> T:
            return await self.call(fn, operation)

        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(run(), home)
        try:
            # Bounded too: the home loop might stop before it runs the call.
            async with asyncio.timeout(self.timeout * 2):
                return await asyncio.wrap_future(future)
        except TimeoutError as exc:
            future.cancel()
            error = StorageUnavailable("the Redis storage's event loop did not answer")
            self.health.stalled = True
            self.health.failed(operation, error)
            raise error from exc

    async def at_home(
        self, fn: Callable[[], Coroutine[Any, Any, T]], within: float | None = None
    ) -> T:
        """Run *fn()* on the home loop (now, if this is it). From another thread's loop, at
        most *within* seconds when given: a home loop that stops meanwhile is then
        :class:`~mcp_cancellation.StorageUnavailable`, not a wait without end."""
        loop = asyncio.get_running_loop()
        if self.loop is None:
            self.loop = loop
        if loop is self.loop:
            return await fn()
        home = self._running_home()  # (before fn(): a coroutine never run is a leak)
        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(fn(), home)
        if within is None:
            return await asyncio.wrap_future(future)
        try:
            async with asyncio.timeout(within):
                return await asyncio.wrap_future(future)
        except TimeoutError as exc:
            future.cancel()
            raise StorageUnavailable("the Redis storage's event loop did not answer") from exc

    def from_thread(self, read: Callable[[], Coroutine[Any, Any, T]], timeout: float) -> T | None:
        """The result of *read()* run on the home loop, for a caller on another thread that
        cannot await (a metrics exporter); ``None`` when the home loop is not running, when
        the caller is on it (blocking would stop the loop that must answer), on a timeout
        or when the storage is unavailable."""
        home = self.loop
        if home is None or home.is_closed() or not home.is_running() or self.closed:
            return None
        with contextlib.suppress(RuntimeError):
            if asyncio.get_running_loop() is home:
                return None
        future = asyncio.run_coroutine_threadsafe(read(), home)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            return None
        except StorageUnavailable:
            return None

    def soon(self, callback: Callable[[], object]) -> None:
        """Run *callback* on the home loop (now if this is it), unless it has closed."""
        home = self.loop
        if home is None or home.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if home is running:
            callback()
        else:
            with contextlib.suppress(RuntimeError):  # the home loop just closed
                home.call_soon_threadsafe(callback)

    def _running_home(self) -> asyncio.AbstractEventLoop:
        home = self.loop
        if home is None or home.is_closed() or not home.is_running():
            raise StorageUnavailable("the Redis storage's event loop is not running")
        return home
