"""One tracked request behind the middleware: the inner app, disconnect detection, the
kill timer, and the request's one log line (private)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any, Protocol

from .. import signals
from .._asgi import ASGIApp, Message, Receive, Scope, Send
from ..errors import REQUEST_CANCELLED
from ..scope import scope_kind
from ..token import Outcome, RequestToken

if TYPE_CHECKING:
    from ..registry import CancellationRegistry


class Host(Protocol):
    """What an exchange needs of the middleware that runs it."""

    app: ASGIApp
    registry: CancellationRegistry
    stream_cancel_timeout: float | None


__all__ = ["DISCONNECT_REASON", "Exchange", "Host", "replay"]

logger = logging.getLogger("mcp_cancellation.asgi")

#: Reason recorded when the client goes away mid-request.
DISCONNECT_REASON = "client disconnected"
_DISCONNECT: Message = {"type": "http.disconnect"}
#: The JSON-RPC error code of a cancelled request, as it appears in a response body.
_CANCELLED_CODE = str(REQUEST_CANCELLED).encode()
_RESULT = b'"result"'
#: Seconds before a tracked request the app itself does not watch gets a disconnect
#: watcher (a task): shorter calls never pay for one. In JSON-response mode a disconnect
#: is noticed at most this much later.
WATCH_DELAY = 0.25


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


class Exchange:
    """One tracked request: the inner app, disconnect detection, and the kill timer.

    After the body has been replayed, exactly one reader owns the real ``receive``:

    * the inner app itself, when it asks for the next message (the SDK does in SSE mode, to
      notice a disconnect): its read is the watch, so it costs no extra task;
    * otherwise a watcher task, started only once the call has run ``WATCH_DELAY``
      seconds (the SDK's JSON mode never reads again): most calls end sooner and pay
      nothing.

    Whoever sees ``http.disconnect`` before the response ended records the cancellation
    (and flips the token) before anyone is told; a timer then cancels the request's task
    if it has not ended ``stream_cancel_timeout`` seconds later.
    """

    __slots__ = (
        "answer",
        "app_reading",
        "body",
        "caller",
        "disconnected",
        "killed",
        "killer",
        "middleware",
        "receive",
        "replayed",
        "response_done",
        "scope",
        "send",
        "task",
        "timer",
        "token",
        "watcher",
    )

    def __init__(
        self,
        middleware: Host,
        scope: Scope,
        receive: Receive,
        send: Send,
        body: bytes,
        token: RequestToken,
        caller: str,
    ) -> None:
        self.middleware = middleware
        self.scope = scope
        self.receive = receive
        self.send = send
        self.body = body
        self.token = token
        self.caller = caller
        self.replayed = False
        self.answer = ""  # "cancelled" (-32800) or "result", once cancelled
        self.response_done = False
        self.app_reading = False
        self.killed = False
        self.disconnected = asyncio.Event()
        self.task: asyncio.Task[Any] | None = None
        self.watcher: asyncio.Task[None] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.killer: asyncio.TimerHandle | None = None

    async def run(self) -> None:
        try:
            self.task = asyncio.current_task()
        except RuntimeError:  # not asyncio (trio): track only, the app owns receive
            await self.middleware.app(self.scope, replay(self.body, None, self.receive), self.send)
            return
        self.timer = asyncio.get_running_loop().call_later(WATCH_DELAY, self._start_watcher)
        try:
            await self.middleware.app(self.scope, self._receive, self._send)
        except asyncio.CancelledError:
            task = self.task
            if not self.killed or task is None or task.uncancel() > 0:
                raise
        finally:
            self.response_done = True  # nothing after this is a cancellation
            self.timer.cancel()
            if self.killer is not None:
                self.killer.cancel()
            if self.watcher is not None:
                self.watcher.cancel()
            if self.token.cancelled:
                self._log_end()

    def _log_end(self) -> None:
        """The one log line of a cancelled request: who, why, and how its work ended;
        the outcome also goes on the token, for ``request.stopped``."""
        token = self.token
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
            "cancelled request %r (scope kind %s, reason %r): %s%s",
            token.request_id,
            scope_kind(self.caller),
            token.reason,
            "completed anyway" if outcome == "completed" else outcome,
            after,
        )

    def _start_watcher(self) -> None:
        if self.watcher is None and not self.app_reading and not self.response_done:
            self.watcher = asyncio.get_running_loop().create_task(self._watch())

    async def _receive(self) -> Message:
        if not self.replayed:
            self.replayed = True
            return {"type": "http.request", "body": self.body, "more_body": False}
        if self.watcher is None and not self.app_reading:
            # The app reads the real receive itself: its read is the watch.
            self.app_reading = True
            if self.timer is not None:
                self.timer.cancel()
            try:
                await self._next_disconnect()
            except asyncio.CancelledError:
                self.app_reading = False
                self._start_watcher()  # the app stopped listening: keep watching
                raise
            await self._on_disconnect()
            return dict(_DISCONNECT)
        await self.disconnected.wait()
        return dict(_DISCONNECT)

    async def _send(self, message: Message) -> None:
        if message["type"] == "http.response.body":
            if self.token.cancelled and not self.answer:
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
            if not self.disconnected.is_set():
                self.disconnected.set()
                self.token.set_cancelled(DISCONNECT_REASON)
            raise

    async def _next_disconnect(self) -> None:
        while True:
            message = await self.receive()
            if message.get("type") == "http.disconnect":
                return

    async def _watch(self) -> None:
        try:
            await self._next_disconnect()
            await self._on_disconnect()
        except asyncio.CancelledError:
            raise
        except Exception:  # a watcher must never take the request down with it
            logger.exception("disconnect watcher failed")

    async def _on_disconnect(self) -> None:
        """The client is gone: flip the token, report the cancellation, arm the kill timer."""
        if self.response_done or self.disconnected.is_set():
            return  # the response had ended: not a cancellation
        self.disconnected.set()
        # Flip this request's own token, and write no row: a row is keyed (scope, id), so
        # it would also cancel every other request of the scope using the same id (another
        # client behind the same address, a retry) though only this one's client left.
        self.token.set_cancelled(DISCONNECT_REASON)
        if signals.request_cancelled.receivers:
            try:
                signals.request_cancelled.fire(
                    self.middleware.registry,
                    request_id=self.token.request_id,
                    scope=self.caller,
                    reason=DISCONNECT_REASON,
                    method="disconnect",
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
