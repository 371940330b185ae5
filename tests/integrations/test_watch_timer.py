"""One timer per event loop starts the disconnect watchers of long calls: each call that
is still unwatched ``WATCH_DELAY`` seconds after it started gets exactly one, in start
order, never earlier; a call that ended or is watched by its app gets none."""

from __future__ import annotations

import asyncio

from mcp_cancellation.integrations._exchange import WATCH_DELAY, Watchlist, Watchlists


class Call:
    """Stands in for an exchange: records when the watchlist starts its watcher."""

    def __init__(self, loop: asyncio.AbstractEventLoop, log: list[Call], done: asyncio.Event):
        self.loop = loop
        self.log = log
        self.done = done
        self.added_at = 0.0
        self.watched_at: float | None = None
        self.watchers = 0
        self.expected = 0

    def start_watcher(self) -> None:
        self.watchers += 1
        self.watched_at = self.loop.time()
        self.log.append(self)
        if len(self.log) == self.expected:
            self.done.set()


async def test_a_flood_of_long_calls_each_get_one_watcher_in_order() -> None:
    loop = asyncio.get_running_loop()
    watchlists = Watchlists()
    started: list[Call] = []
    done = asyncio.Event()
    calls = [Call(loop, started, done) for _ in range(3000)]
    for n, call in enumerate(calls):
        call.added_at = loop.time()
        watchlist = watchlists.add(call, loop)
        if n % 1000 == 999:
            await asyncio.sleep(0)  # let the loop run between bursts, as a server would
    # Every other call ends (or its app reads receive itself) before it is due.
    ended = calls[::2]
    for call in ended:
        watchlist.discard(call)
    long_calls = calls[1::2]
    for call in calls:
        call.expected = len(long_calls)
    await asyncio.wait_for(done.wait(), timeout=10)

    assert started == long_calls  # each once, in start order, and only those
    assert all(call.watchers == 1 for call in long_calls)
    assert all(call.watchers == 0 for call in ended)
    for call in long_calls:
        assert call.watched_at is not None
        assert call.watched_at - call.added_at >= WATCH_DELAY  # never early
    assert watchlist.pending == {}
    assert watchlist.timer is None  # nothing left: the timer is not re-armed


async def test_calls_started_apart_are_each_watched_after_their_own_delay() -> None:
    """A call added while an earlier one waits is not swept up by the earlier one's
    timer: the second is added by a loop timer halfway through the first's delay, so it
    is always added before the first is due (timers run in order)."""
    loop = asyncio.get_running_loop()
    watchlists = Watchlists()
    started: list[Call] = []
    done = asyncio.Event()
    first, second = Call(loop, started, done), Call(loop, started, done)
    first.expected = second.expected = 2

    def add(call: Call) -> Watchlist:
        call.added_at = loop.time()
        return watchlists.add(call, loop)

    watchlist = add(first)
    loop.call_at(first.added_at + WATCH_DELAY / 2, add, second)
    await asyncio.wait_for(done.wait(), timeout=10)
    assert started == [first, second]
    for call in (first, second):
        assert call.watchers == 1
        assert call.watched_at is not None
        assert call.watched_at - call.added_at >= WATCH_DELAY  # never early
    assert watchlist.timer is None
    # Empty, the watchlist arms its timer again for the next call.
    assert add(Call(loop, started, asyncio.Event())) is watchlist
    assert watchlist.timer is not None


def test_each_event_loop_gets_its_own_watchlist() -> None:
    watchlists = Watchlists()

    async def on_this_loop() -> tuple[Watchlist, Watchlist]:
        loop = asyncio.get_running_loop()
        calls = [Call(loop, [], asyncio.Event()) for _ in range(2)]
        first, again = (watchlists.add(call, loop) for call in calls)
        for call in calls:
            first.discard(call)
        return first, again

    first, again = asyncio.run(on_this_loop())
    assert first is again  # one per loop, not one per request
    second, _ = asyncio.run(on_this_loop())
    assert second is not first
    assert second.loop is not first.loop
