"""One tracked request behind the middleware: what its app reads and sends, disconnect
detection, the kill timer, and the request's one log line (private)."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import TYPE_CHECKING, Any, Protocol

from .._asgi import Message, Receive, Send
from .._errors import REQUEST_CANCELLED
from .._token import Outcome
from ..scope import scope_kind
from ._jsonrpc import answer_error

if TYPE_CHECKING:
    from .._registry import CancellationRegistry
    from .._request_context import RequestContext


class Host(Protocol):
    """What an exchange needs of the middleware that runs its app."""

    registry: CancellationRegistry
    stream_cancel_timeout: float | None
    watchlists: Watchlists


__all__ = [
    "DISCONNECT_REASON",
    "ERROR_TYPE",
    "METHOD_NAME",
    "PROTOCOL_VERSION",
    "Exchange",
    "Host",
    "Watched",
    "Watchlist",
    "Watchlists",
    "operation",
    "replay",
]

logger = logging.getLogger("mcp_cancellation.asgi")

#: The operation attributes the middleware keeps in a request's ``RequestToken.labels``
#: (OpenTelemetry's MCP conventions' names): the core passes them to ``request.ended``
#: untouched, for the bridges' ``mcp.server.operation.duration``.
METHOD_NAME = "mcp.method.name"
PROTOCOL_VERSION = "mcp.protocol.version"
ERROR_TYPE = "error.type"


def operation(method: str | None, protocol_version: str | None) -> dict[str, str]:
    """The labels of a request with JSON-RPC *method* at MCP *protocol_version*."""
    labels: dict[str, str] = {}
    if method is not None:
        labels[METHOD_NAME] = method
    if protocol_version is not None:
        labels[PROTOCOL_VERSION] = protocol_version
    return labels


#: Reason recorded when the client goes away mid-request.
DISCONNECT_REASON = "client disconnected"
_DISCONNECT: Message = {"type": "http.disconnect"}
#: The JSON-RPC error code of a cancelled request, as it appears in a response body.
_CANCELLED_CODE = str(REQUEST_CANCELLED).encode()
_RESULT = b'"result"'
#: Seconds before a tracked request the app itself does not watch gets a disconnect
#: watcher (a task): shorter calls never pay for one. In JSON-response mode a disconnect
#: is noticed at most this much (plus ``WATCH_TICK``) later.
WATCH_DELAY = 0.25
#: The watch timer's granularity: requests that come due within this many seconds of
#: each other get their watchers from one run of the timer.
WATCH_TICK = 0.025


def replay(body: bytes, trailing: Message | None, receive: Receive) -> Receive:
    """A ``receive`` that hands out *body* once (then *trailing*), then the real one."""
    pending: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]
    if trailing is not None:
        pending.append(trailing)
    pending.reverse()

    async def replay() -> Message:
        if pending:
            return pending.pop()
        return await receive()

    return replay


class Watched(Protocol):
    """What a :class:`Watchlist` holds: a call that can start its own disconnect watcher."""

    def start_watcher(self) -> None: ...


class Watchlist:
    """The exchanges of one event loop that nobody watches yet, in start order, and the one
    timer that starts a watcher for each once it has run :data:`WATCH_DELAY` seconds.

    One timer per loop instead of one per request: a ``TimerHandle`` per request (made,
    pushed on the loop's heap, cancelled, popped) was the largest single part of the
    middleware's CPU per call. A request costs a dict insert and delete here instead.
    """

    __slots__ = ("loop", "pending", "timer")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.pending: dict[Watched, float] = {}  # insertion order is start order
        self.timer: asyncio.TimerHandle | None = None

    def discard(self, exchange: Watched) -> None:
        self.pending.pop(exchange, None)

    def _tick(self) -> None:
        """Start the watchers that are due; re-arm for the oldest one left, if any.

        One pass over the pending calls in start order, stopping at the first that is not
        due (not a fresh scan from the front per due call: a flood of long calls must not
        make a tick quadratic)."""
        self.timer = None
        pending = self.pending
        now = self.loop.time()
        due_before = now - WATCH_DELAY
        due: list[Watched] = []
        for exchange, started in pending.items():
            if started > due_before:
                when = max(started + WATCH_DELAY, now + WATCH_TICK)
                self.timer = self.loop.call_at(when, self._tick)
                break
            due.append(exchange)
        for exchange in due:
            del pending[exchange]
            try:
                exchange.start_watcher()
            except Exception:  # one exchange must not stop the others being watched
                logger.exception("starting a disconnect watcher failed")


class Watchlists:
    """A middleware's :class:`Watchlist`, one per event loop serving it (in practice one:
    the latest loop's is kept, and a replaced one runs on until its requests end)."""

    __slots__ = ("_current",)

    def __init__(self) -> None:
        self._current: Watchlist | None = None

    def add(self, exchange: Watched, loop: asyncio.AbstractEventLoop) -> Watchlist:
        """Put *exchange* on the watchlist of *loop*, which is returned; arm its timer if
        it is not armed."""
        current = self._current
        if current is None or current.loop is not loop:
            current = self._current = Watchlist(loop)
        now = loop.time()
        current.pending[exchange] = now
        if current.timer is None:
            current.timer = loop.call_at(now + WATCH_DELAY, current._tick)
        return current


class Exchange:
    """One tracked request: the inner app, disconnect detection, and the kill timer.

    After the body has been replayed, exactly one reader owns the real ``receive``:

    * the inner app itself, when it asks for the next message (the SDK does in SSE mode, to
      notice a disconnect): its read is the watch, so it costs no extra task;
    * otherwise a watcher task, started by the loop's :class:`Watchlist` only once the call
      has run ``WATCH_DELAY`` seconds (the SDK's JSON mode never reads again): most calls
      end sooner and pay nothing.

    Whoever sees ``http.disconnect`` before the response ended records the cancellation
    (and flips the token) before anyone is told; a timer then cancels the request's task
    if it has not ended ``stream_cancel_timeout`` seconds later.
    """

    # What starts the same for every call is a class-level default, written on the
    # instance only when it changes (most calls change none of it): a call's exchange is
    # made with six writes, not twenty.
    replayed = False
    answer = ""  # "cancelled" (-32800) or "result", once cancelled
    response_done = False
    app_reading = False
    killed = False
    gone = False  # the client disconnected before the response ended
    gone_event: asyncio.Event | None = None  # made only for a second reader
    task: asyncio.Task[Any] | None = None
    watcher: asyncio.Task[None] | None = None
    watchlist: Watchlist | None = None
    killer: asyncio.TimerHandle | None = None
    cancel_on_disconnect = True  # False where the client may resume the stream

    def __init__(
        self,
        middleware: Host,
        receive: Receive,
        send: Send,
        body: bytes,
        context: RequestContext,
        cancel_on_disconnect: bool = True,
    ) -> None:
        self.middleware = middleware
        self.receive = receive
        self.send = send
        self.body = body
        self.context = context
        if not cancel_on_disconnect:
            self.cancel_on_disconnect = False

    # The middleware runs the app itself, between these three (no coroutine of the
    # exchange's own on the app's await chain):
    #
    #     async with exchange.context:
    #         receive, send = exchange.begin()
    #         try:
    #             await app(scope, receive, send)
    #         except asyncio.CancelledError:
    #             if not exchange.killed_by_timer():
    #                 raise
    #         finally:
    #             exchange.end()

    def begin(self) -> tuple[Receive, Send]:
        """Start watching the request (inside its registry block, in its task); the
        ``receive`` and ``send`` to give the app."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not asyncio (trio): track only, the app owns receive
            return replay(self.body, None, self.receive), self.send
        self.task = asyncio.current_task(loop)  # one running-loop lookup, not two
        self.watchlist = self.middleware.watchlists.add(self, loop)
        return self._receive, self._send

    def killed_by_timer(self) -> bool:
        """Whether the ``CancelledError`` ending the app is this exchange's kill timer's
        alone (then the request ends quietly) rather than a cancellation from outside.
        When the timer killed the task, this takes its ``cancel()`` back (``uncancel``):
        call it once, from the ``except`` that caught the error."""
        task = self.task
        return self.killed and task is not None and task.uncancel() == 0

    def end(self) -> None:
        """The app has returned or raised: nothing after this is a cancellation."""
        self.response_done = True
        if self.watchlist is not None:
            self.watchlist.discard(self)
        if self.killer is not None:
            self.killer.cancel()
        if self.watcher is not None:
            self.watcher.cancel()
        if self.context.token.cancelled:
            self._log_end()

    def _log_end(self) -> None:
        """The one log line of a cancelled request: who, why, and how its work ended;
        the outcome also goes on the token, for ``request.stopped``."""
        token = self.context.token
        if self.killed:
            outcome: Outcome = "killed"
        elif self.answer == "result" and not token.observed:
            outcome = "completed"
        else:
            # It answered -32800, its tool saw the cancellation, or its handler ended
            # without an answer (the SDK cancels it when an SSE stream closes).
            outcome = "stopped"
        token.set_outcome(outcome)
        at = token.cancelled_at
        after = (
            "" if at is None else f" {max(0.0, time.monotonic() - at):.2f} s after the cancellation"
        )
        logger.info(
            "cancelled request %r (scope kind %s, reason %r, worker %s pid %d): %s%s",
            token.request_id,
            scope_kind(token.scope),
            token.reason,
            self.middleware.registry.instance_id,
            os.getpid(),
            "completed anyway" if outcome == "completed" else outcome,
            after,
        )

    def start_watcher(self) -> None:
        """Watch for a disconnect in a task of its own, unless someone already does."""
        if self.watcher is None and not self.app_reading and not self.response_done:
            self.watcher = asyncio.get_running_loop().create_task(self._watch())

    async def _receive(self) -> Message:
        if not self.replayed:
            self.replayed = True
            return {"type": "http.request", "body": self.body, "more_body": False}
        if self.watcher is None and not self.app_reading:
            # The app reads the real receive itself: its read is the watch.
            self.app_reading = True
            if self.watchlist is not None:
                self.watchlist.discard(self)
            receive = self.receive
            try:
                # Inline, not a helper coroutine: the app's listener waits here for the
                # whole call, through one frame of the middleware's, not two.
                while (await receive()).get("type") != "http.disconnect":
                    pass
            except asyncio.CancelledError:
                self.app_reading = False
                self.start_watcher()  # the app stopped listening: keep watching
                raise
            self._on_disconnect()
            return dict(_DISCONNECT)
        if not self.gone:
            if self.gone_event is None:
                self.gone_event = asyncio.Event()
            await self.gone_event.wait()
        return dict(_DISCONNECT)

    async def _send(self, message: Message) -> None:
        if message["type"] == "http.response.body":
            if ERROR_TYPE not in self.context.token.labels:
                self._read_error(message.get("body", b""))
            if self.context.token.cancelled and not self.answer:
                # What the app answered once cancelled (only then: it costs a scan).
                body = message.get("body", b"")
                if _CANCELLED_CODE in body:
                    self.answer = "cancelled"
                elif _RESULT in body:
                    self.answer = "result"
            if not message.get("more_body", False):
                self.response_done = True
        try:
            await self.send(message)
        except Exception:
            # A server that raises for a client that is gone (uvicorn returns quietly): the
            # same disconnect as an http.disconnect, unless the response had ended.
            self._on_disconnect()
            raise

    def _read_error(self, body: bytes) -> None:
        """Note how the answer failed (``error.type`` of ``request.ended``), if it did:
        from the JSON-RPC envelope only (:func:`._jsonrpc.answer_error`)."""
        if body:
            error = answer_error(body)
            if error is not None:
                self.context.token.labels[ERROR_TYPE] = error

    def _set_gone(self) -> None:
        self.gone = True
        if self.gone_event is not None:
            self.gone_event.set()

    async def _watch(self) -> None:
        receive = self.receive
        try:
            while (await receive()).get("type") != "http.disconnect":
                pass
            self._on_disconnect()
        except asyncio.CancelledError:
            raise
        except Exception:  # a watcher must never take the request down with it
            logger.exception("disconnect watcher failed")

    def _on_disconnect(self) -> None:
        """The client is gone: flip the token, report the cancellation (unless the request
        was cancelled already), arm the kill timer."""
        if self.response_done or self.gone:
            return  # the response had ended: not a cancellation
        self._set_gone()
        if not self.cancel_on_disconnect:
            return  # a stream the client may resume (protocol 2025-11-25 and before)
        # A request already cancelled (the mcp client POSTs notifications/cancelled, then
        # drops the call's stream) was reported then: the same cancellation, not a second.
        try:
            self.middleware.registry.cancel_token(
                self.context.token, DISCONNECT_REASON, method="disconnect"
            )
        except Exception:  # a receiver must not keep the kill timer from being armed
            logger.exception("request.cancelled receiver failed")
        timeout = self.middleware.stream_cancel_timeout
        if timeout is not None and not self.response_done:
            self.killer = asyncio.get_running_loop().call_later(timeout, self._kill)

    def _kill(self) -> None:
        task = self.task
        if task is not None and not task.done() and not self.response_done:
            self.killed = True
            task.cancel()
