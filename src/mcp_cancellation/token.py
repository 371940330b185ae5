"""The per-request cancellation token that tool code polls."""

from __future__ import annotations

import time
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Final, Literal

from .errors import RequestCancelled

__all__ = [
    "OTHER_TOOL",
    "OUTCOMES",
    "Outcome",
    "RequestToken",
    "cancellation_error_type",
    "new_token",
]

#: The ``tool`` label of a request that calls no tool the server registered (and of any
#: request whose tool nobody named).
OTHER_TOOL: Final = "other"

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


_write: Final = object.__setattr__  # past the seal, for the token's own methods
_new: Final = object.__new__


class _TokenState:
    """The slots of a :class:`RequestToken`, written plainly while one is built."""

    __slots__ = (
        "_cancelled_at",
        "_observed",
        "_outcome",
        "_reason",
        "cancelled",
        "request_id",
        "scope",
        "tool",
    )


class RequestToken(_TokenState):
    """The cancellation state of one in-flight request.

    :attr:`cancelled` is a plain synchronous read, safe from any thread: tools running in a
    worker thread poll it without touching the event loop or the storage. The registry (or,
    for a shared storage, its subscriber) flips the token when a cancellation for the
    request is recorded anywhere.

    A token is sealed, like a frozen dataclass: its attributes are read-only to the code
    that holds it, while :attr:`cancelled` stays a bare slot read (no property call: tools
    poll it in tight loops).
    """

    __slots__ = ()

    if TYPE_CHECKING:
        request_id: str
        scope: str
        #: The tool this request calls, as a metric label (a registered tool's name, or
        #: ``other``), or ``None`` when it is not a tool call or nobody said.
        tool: str | None
        _reason: str | None
        _cancelled_at: float
        _observed: bool
        _outcome: Outcome | None

        def __init__(self, request_id: str, scope: str, tool: str | None = None) -> None: ...

        @property
        def cancelled(self) -> bool:
            """Whether a cancellation for this request has been recorded."""

    def __new__(cls, request_id: str, scope: str, tool: str | None = None) -> RequestToken:
        token = new_token(request_id, scope, tool)
        if cls is not RequestToken:  # a subclass (with no slots of its own) keeps its class
            _write(token, "__class__", cls)
        return token

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"RequestToken.{name} is read-only")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"RequestToken.{name} is read-only")

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
        _write(self, "_outcome", outcome)

    def mark_observed(self) -> None:
        """Record that tool code saw the cancellation (see :attr:`observed`)."""
        _write(self, "_observed", True)

    def raise_if_cancelled(self) -> None:
        """Raise :class:`~mcp_cancellation.RequestCancelled` if the request was cancelled."""
        if self.cancelled:
            _write(self, "_observed", True)
            raise cancellation_error_type.get()(self._reason)

    def set_cancelled(self, reason: str | None = None) -> None:
        """Flip the token (used by storages; idempotent, keeps the first reason)."""
        if not self.cancelled:
            _write(self, "_reason", reason)
            _write(self, "_cancelled_at", time.monotonic())
            _write(self, "cancelled", True)

    def __repr__(self) -> str:
        state = "cancelled" if self.cancelled else "active"
        return f"<RequestToken {self.request_id!r} {state}>"


def new_token(request_id: str, scope: str, tool: str | None = None) -> RequestToken:
    """A fresh :class:`RequestToken` (what ``RequestToken(...)`` returns, one call cheaper:
    the registry makes one per request). Built as the unsealed layout with plain slot
    writes, then sealed by a class switch: cheaper than writing each slot past
    ``__setattr__``."""
    token: Any = _new(_TokenState)
    token.request_id = request_id
    token.scope = scope
    token.tool = tool
    token.cancelled = False
    token._reason = None
    token._cancelled_at = 0.0
    token._observed = False
    token._outcome = None
    token.__class__ = RequestToken
    return token  # type: ignore[no-any-return]
