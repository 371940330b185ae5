"""Push between workers: the listener that flips this worker's tokens when another worker
records a cancellation, and the heartbeat (private). Both start at the storage's first
call (never on an operator's storage). docs/architecture.md, "The Redis table", has the
channels and what each message does.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, cast

from ._codec import decode_reason, split_netstrings, text, to_bytes
from ._home import UNAVAILABLE, HomeLoop, reraise_cancellation
from ._journal import Journal
from ._table import Keys

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from redis.asyncio.client import PubSub
    from redis.asyncio.cluster import RedisCluster

__all__ = ["RECOVERING", "ChannelSubscription", "Push", "Subscription", "announce_refusal"]

#: The message on ``P resync`` of a worker whose writes Redis refuses (out of memory, a
#: missing permission): until it stops, "not in flight" cannot be told.
RECOVERING = "recovering"

logger = logging.getLogger("mcp_cancellation.redis")


async def announce_refusal(
    client: Redis | RedisCluster, channel: bytes, sharded: bool, within: float
) -> None:
    """Tell every worker that Redis refuses this worker's writes: their Redis then refuses
    cancellations of ids it does not see in flight (503, never a 202 that does nothing).
    Not a storage call: its success would count as Redis answering again."""
    publish = client.spublish if sharded else client.publish
    with contextlib.suppress(*UNAVAILABLE):
        async with asyncio.timeout(within):
            await publish(channel, RECOVERING)


class Subscription(Protocol):
    """How the listener holds its channel: the message types it sees, and how a
    subscription is opened and its resources released."""

    confirmation: str
    message: str
    lost: str | None

    async def open(self, *channels: bytes) -> PubSub: ...

    async def close(self) -> None: ...


class ChannelSubscription:
    """``SUBSCRIBE`` on the storage's own client (one Redis server)."""

    confirmation = "subscribe"
    message = "message"
    lost: str | None = None

    def __init__(self, client: Redis) -> None:
        self._client = client

    async def open(self, *channels: bytes) -> PubSub:
        pubsub = self._client.pubsub()
        await pubsub.subscribe(*channels)
        return pubsub

    async def close(self) -> None:
        return None


@dataclasses.dataclass(eq=False, repr=False, kw_only=True)
class Push:
    """The background half of one worker's Redis storage (see the module docstring)."""

    subscription: Subscription
    home: HomeLoop
    keys: Keys
    journal: Journal
    heartbeat_ttl: float
    backoff: tuple[float, float]
    #: Hears a task's answer pushed to this worker (``a`` + netstrings, lua/task_answer.lua).
    answered: Callable[[bytes], None]
    #: Called on each (re)subscription: messages may have been missed meanwhile.
    resubscribed: Callable[[], None]
    #: Called once the seeks' channel is subscribed (the storage then lets calls stay
    #: young: see Journal.hear_seeks).
    hearing_seeks: Callable[[], None]
    subscribed: bool = dataclasses.field(default=False, init=False)
    _tasks: list[asyncio.Task[None]] = dataclasses.field(default_factory=list, init=False)
    _pubsub: PubSub | None = dataclasses.field(default=None, init=False)
    #: The stream the seeks were heard on (see :meth:`hears`).
    _heard_on: object = dataclasses.field(default=None, init=False)

    def __post_init__(self) -> None:
        self.journal.ear = self.hears

    def hears(self) -> bool:
        """Whether the seeks still come on the stream they were first heard on: its
        connection open, with no error and no end read, and not replaced by the client's
        own reconnection (redis-py resubscribes under the listener, and what was
        published in between is lost). A connection this cannot see into counts as
        heard (the listener's ping still finds it dead)."""
        stream = _stream(self._pubsub)
        if stream is _UNSEEN:
            return True
        if stream is None or stream is not self._heard_on:
            return False
        reader = cast("asyncio.StreamReader", stream)
        return not reader.at_eof() and reader.exception() is None

    @property
    def worker(self) -> str:
        return self.journal.worker

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def started(self) -> bool:
        return bool(self._tasks)

    def start(self) -> None:
        """Start the listener and the heartbeat on the running (home) loop."""
        loop = asyncio.get_running_loop()
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

    # -- listener ----------------------------------------------------------------------

    def deliver(self, data: bytes | str) -> None:
        """Flip the tokens one pushed message reaches: ``(scope, key, reason, origin,
        sequence)``, netstrings (lua/add.lua); the origin is ``@operator`` or ``@``. A
        message that starts with ``a`` is a task's answer instead (lua/task_answer.lua)."""
        raw = to_bytes(data)
        if raw[:1] == b"a":
            try:
                self.answered(raw)
            except (ValueError, IndexError):
                logger.warning("ignoring a malformed answer message")
            return
        try:
            scope, key, reason, origin, sequence = split_netstrings(raw)
            cause = decode_reason(reason)
            method = text(origin)[1:] or None
            tokens = self.journal.pushed(text(scope), text(key), int(sequence), cause, method)
        except (ValueError, IndexError):
            logger.warning("ignoring a malformed cancellation message")
            return
        for token in tokens:
            token._cancel(cause, method)

    def seek(self, data: bytes | str) -> None:
        """A cancellation seeks its request's young calls: ``s`` or ``p`` (a pending
        row) and netstrings of the scope and key (lua/owners.lua, ``seek``)."""
        raw = to_bytes(data)
        try:
            scope, key = split_netstrings(raw[1:])
        except (ValueError, IndexError):
            logger.warning("ignoring a malformed seek message")
            return
        self.journal.sought(text(scope), text(key), raw[:1] == b"p")

    async def _listen(self) -> None:
        channel = self.keys.pushes(self.worker)
        broadcast = self.keys.resyncs
        seeks = self.keys.seeks
        delay = self.backoff[0]
        timeout = self.home.timeout
        # A connection that silently died (a partition, no RST) never errors: ping it and
        # reconnect when nothing, not even the pong, came back in time.
        ping_every = min(self.heartbeat_ttl / 3, 10.0)
        loop = asyncio.get_running_loop()
        subscription = self.subscription
        while not self.home.closed:
            pubsub: PubSub | None = None
            try:
                async with asyncio.timeout(timeout):
                    pubsub = await subscription.open(channel, broadcast, seeks)
                self._pubsub = pubsub
                confirmed: set[bytes] = set()
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
                        subscribed = to_bytes(message["channel"])
                        if subscribed in confirmed:  # the client reconnected under us
                            confirmed.clear()
                            self.journal.hear_seeks(False)
                        confirmed.add(subscribed)
                        self.subscribed = True
                        delay = self.backoff[0]
                        self.journal.want_resync()  # messages may have been missed
                        self.resubscribed()
                        if subscribed == seeks:
                            self._heard_on = _stream(pubsub)
                            self.hearing_seeks()  # (the last channel subscribed)
                    elif kind == subscription.message:
                        source = to_bytes(message["channel"])
                        if source == seeks:
                            self.seek(message["data"])
                        elif source == broadcast:
                            data = text(message["data"])
                            if data == RECOVERING:  # a worker's writes are refused
                                self.home.health.recovering_elsewhere()
                            elif data != self.journal.epoch:
                                self.journal.want_resync()  # the table was lost
                        else:
                            self.deliver(message["data"])
                    elif kind == subscription.lost:
                        raise ConnectionError("the server dropped the subscription")
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # any failure: reconnect with backoff, never die
                reraise_cancellation()
                self.home.health.failed("subscribe", exc)
                if self.subscribed:
                    logger.warning("Redis pub/sub connection lost: %s", exc)
                self.subscribed = False
            finally:
                self.subscribed = False
                self._pubsub = self._heard_on = None
                self.journal.hear_seeks(False)
                if pubsub is not None:
                    with contextlib.suppress(Exception):
                        async with asyncio.timeout(timeout):
                            # (Any: redis-py types aclose() from 8.2 on, not before)
                            await cast(Any, pubsub).aclose()
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(timeout):
                        await subscription.close()
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.backoff[1])

    # -- heartbeat ---------------------------------------------------------------------

    async def _heartbeat(self) -> None:
        interval = self.heartbeat_ttl / 3
        while not self.home.closed:
            await asyncio.sleep(interval)
            self.journal.heartbeat()


#: What :func:`_stream` returns for a pub/sub object it cannot see into.
_UNSEEN = object()


def _stream(pubsub: PubSub | None) -> object:
    """The stream a pub/sub object reads from now (``None`` while it has none: closed,
    or reconnecting), or ``_UNSEEN``."""
    if pubsub is None:
        return None
    connection = getattr(pubsub, "connection", _UNSEEN)
    if connection is None:
        return None
    return getattr(connection, "_reader", _UNSEEN)
