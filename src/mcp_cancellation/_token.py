"""The per-request cancellation token that tool code polls."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Final, Literal

from ._errors import RequestCancelled

__all__ = [
    "OPERATOR",
    "OTHER_TOOL",
    "OUTCOMES",
    "Outcome",
    "RequestToken",
    "TOOL_ERROR",
    "cancellation_error_type",
]

#: The ``tool`` label of a request that calls no tool the server registered (and of any
#: request whose tool nobody named).
OTHER_TOOL: Final = "other"
#: The ``method`` of ``request.cancelled`` for an operator's cancellation.
OPERATOR: Final = "operator"
#: The ``error.type`` of a request answered with a tool result whose ``isError`` is true.
TOOL_ERROR: Final = "tool_error"

#: How the work of a cancelled request ended (the ``outcome`` of ``request.stopped`` and
#: of ``mcp_cancellation_cancel_to_stop_seconds``).
Outcome = Literal["stopped", "killed", "completed"]
#: Every :data:`Outcome`: ``stopped`` (it returned or raised because it was cancelled),
#: ``killed`` (the middleware's ``stream_cancel_timeout`` kill), ``completed`` (it finished
#: its work anyway).
OUTCOMES: Final[tuple[Outcome, ...]] = ("stopped", "killed", "completed")

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
    request is recorded anywhere; tool code only reads it.
    """

    __slots__ = (
        "_cancelled_at",
        "_observed",
        "_outcome",
        "_reason",
        "_report",
        "at_start",
        "cancelled",
        "labels",
        "request_id",
        "scope",
        "started",
        "tool",
    )

    def __init__(
        self,
        request_id: str,
        scope: str,
        tool: str | None = None,
        *,
        labels: dict[str, str] | None = None,
        at_start: bool = False,
    ) -> None:
        self.request_id = request_id
        #: Whether a shared storage tracks this request at its start, rather than once it
        #: has run the storage's ``track_delay`` (a task's run: every moment of it is
        #: listed, and an operator's cancel reaches it).
        self.at_start = at_start
        self.scope = scope
        #: The tool this request calls, as a metric label (a registered tool's name, or
        #: ``other``), or ``None`` when it is not a tool call or nobody said.
        self.tool = tool
        #: The attributes of the operation this request is, as the integration serving it
        #: names them (the middleware: ``mcp.method.name``, ``mcp.protocol.version`` and,
        #: once its answer failed, ``error.type``). The core never reads them:
        #: ``request.ended`` carries them to the bridges.
        self.labels: dict[str, str] = {} if labels is None else labels
        #: When the request started (``time.monotonic()``).
        self.started = time.monotonic()
        #: Whether a cancellation for this request has been recorded.
        self.cancelled = False
        self._reason: str | None = None
        self._cancelled_at = 0.0
        self._observed = False
        self._outcome: Outcome | None = None
        #: Set by the registry that tracks the token (see :meth:`_cancel`).
        self._report: Callable[[RequestToken, str | None, str], None] | None = None

    @property
    def reason(self) -> str | None:
        """The sanitised reason given with the cancellation, if any."""
        return self._reason

    @property
    def cancelled_at(self) -> float | None:
        """When the token flipped (``time.monotonic()``), or ``None`` while it has not."""
        return self._cancelled_at if self.cancelled else None

    @property
    def observed(self) -> bool:
        """Whether tool code saw the cancellation: :func:`~mcp_cancellation.cancelled`
        returned true, or a ``raise_if_cancelled`` raised. (A direct read of
        :attr:`cancelled` is not counted: it stays a bare attribute read.)"""
        return self._observed

    @property
    def outcome(self) -> Outcome | None:
        """How its work ended, as the integration that ran it saw it (see
        :meth:`set_outcome`); ``None`` until one said."""
        return self._outcome

    def set_outcome(self, outcome: Outcome) -> None:
        """Say how the work of this cancelled request ended, before its
        ``registry.request()`` block exits (the middleware does: it alone knows a kill
        or an answer). Without it the block's exit decides: ``stopped`` if it raised a
        cancellation or tool code saw it (:attr:`observed`), else ``completed``."""
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {OUTCOMES}, not {outcome!r}")
        self._outcome = outcome

    def mark_observed(self) -> None:
        """Record that tool code saw the cancellation (see :attr:`observed`)."""
        self._observed = True

    def raise_if_cancelled(self) -> None:
        """Raise :class:`~mcp_cancellation.RequestCancelled` if the request was cancelled."""
        if self.cancelled:
            self._observed = True
            raise cancellation_error_type.get()(self._reason)

    def _cancel(self, reason: str | None = None, method: str | None = None) -> None:
        """Flip the token (for the registry and the storages; idempotent, keeps the first
        reason). A *method* given here (an operator's cancellation, which any process may
        have issued) is reported by the registry that tracks the token, from the process
        whose call it stops: that process counts it."""
        if not self.cancelled:
            self._reason = reason
            self._cancelled_at = time.monotonic()
            self.cancelled = True
            report = self._report
            if method is not None and report is not None:
                report(self, reason, method)

    def __repr__(self) -> str:
        state = "cancelled" if self.cancelled else "active"
        return f"<RequestToken {self.request_id!r} {state}>"
