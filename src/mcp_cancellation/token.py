"""The per-request cancellation token that tool code polls."""

from __future__ import annotations

import time
from contextvars import ContextVar
from operator import attrgetter
from typing import TYPE_CHECKING

from .errors import RequestCancelled

__all__ = ["RequestToken", "cancellation_error_type"]

#: The exception :meth:`RequestToken.raise_if_cancelled` raises in this context: a
#: framework integration sets a subclass of :class:`~mcp_cancellation.RequestCancelled`
#: that its framework handles quietly (see :mod:`mcp_cancellation.integrations.fastmcp`).
cancellation_error_type: ContextVar[type[RequestCancelled]] = ContextVar(
    "mcp_cancellation_error_type", default=RequestCancelled
)


class RequestToken:
    """The cancellation state of one in-flight request.

    :attr:`cancelled` is a plain synchronous read, safe from any thread: tools running in a
    worker thread poll it without touching the event loop or the storage. The registry (or,
    for a shared storage, its subscriber) flips the token when a cancellation for the
    request is recorded anywhere.
    """

    __slots__ = ("_cancelled", "_cancelled_at", "_observed", "_reason", "request_id", "scope")

    def __init__(self, request_id: str, scope: str) -> None:
        self.request_id = request_id
        self.scope = scope
        self._cancelled = False
        self._reason: str | None = None
        self._cancelled_at = 0.0
        self._observed = False

    if TYPE_CHECKING:

        @property
        def cancelled(self) -> bool:
            """Whether a cancellation for this request has been recorded."""

    else:
        # Read-only, with a C-level getter (no Python frame): tools poll it in tight loops.
        cancelled = property(
            attrgetter("_cancelled"), doc="Whether a cancellation for this request was recorded."
        )

    @property
    def reason(self) -> str | None:
        """The sanitised reason given with the cancellation, if any."""
        return self._reason

    @property
    def cancelled_at(self) -> float | None:
        """When the token flipped (``time.monotonic()``), or ``None`` while it has not."""
        return self._cancelled_at if self._cancelled else None

    @property
    def observed(self) -> bool:
        """Whether tool code saw the cancellation: :func:`~mcp_cancellation.cancelled`
        returned true, or a ``raise_if_cancelled`` raised. (A direct read of
        :attr:`cancelled` is not counted: it stays a bare attribute read.)"""
        return self._observed

    def mark_observed(self) -> None:
        """Record that tool code saw the cancellation (see :attr:`observed`)."""
        self._observed = True

    def raise_if_cancelled(self) -> None:
        """Raise :class:`~mcp_cancellation.RequestCancelled` if the request was cancelled."""
        if self._cancelled:
            self._observed = True
            raise cancellation_error_type.get()(self._reason)

    def set_cancelled(self, reason: str | None = None) -> None:
        """Flip the token (used by storages; idempotent, keeps the first reason)."""
        if not self._cancelled:
            self._reason = reason
            self._cancelled_at = time.monotonic()
            self._cancelled = True

    def __repr__(self) -> str:
        state = "cancelled" if self._cancelled else "active"
        return f"<RequestToken {self.request_id!r} {state}>"
