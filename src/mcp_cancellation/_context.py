"""The current request, for tool code: :func:`cancelled` and :func:`raise_if_cancelled`.

The middleware (or :meth:`CancellationRegistry.request`) puts the request's
:class:`~mcp_cancellation.RequestToken` in a context variable. Context variables follow the
request into the SDK's tool handler and into worker threads started with
``anyio.to_thread.run_sync`` or ``asyncio.to_thread``, so a tool polls without arguments.
"""

from __future__ import annotations

from contextvars import ContextVar

from ._token import RequestToken

__all__ = ["CURRENT_REQUEST", "cancelled", "current_token", "raise_if_cancelled"]

#: The current request's token (``registry.request()`` sets it for its block).
CURRENT_REQUEST: ContextVar[RequestToken | None] = ContextVar(
    "mcp_cancellation_request", default=None
)


def current_token() -> RequestToken | None:
    """The token of the request being served, or ``None`` outside a tracked request."""
    return CURRENT_REQUEST.get()


def cancelled() -> bool:
    """Whether the request being served has been cancelled (``False`` outside one)."""
    token = CURRENT_REQUEST.get()
    if token is None or not token.cancelled:
        return False
    token.mark_observed()  # the tool saw it: the request then ends as "stopped"
    return True


def raise_if_cancelled() -> None:
    """Raise :class:`~mcp_cancellation.RequestCancelled` if the current request was
    cancelled; do nothing outside a tracked request."""
    token = CURRENT_REQUEST.get()
    if token is not None and token.cancelled:
        token.raise_if_cancelled()
