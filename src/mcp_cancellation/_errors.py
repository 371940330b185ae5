"""Exceptions raised by mcp-cancellation.

The tree, all rooted in one class so callers can catch everything at once::

    CancellationError
     ├── InvalidRequestId         (also a ValueError)  bad JSON-RPC id given to the registry
     ├── ConfigurationError       (also a ValueError)  bad limit or setting at construction
     ├── CancellationLimitReached                      the caller's scope is at its quota
     ├── RequestCancelled                              raised inside a tool that was cancelled
     └── StorageUnavailable                            the backing store could not be reached
"""

from __future__ import annotations

__all__ = [
    "REQUEST_CANCELLED",
    "CancellationError",
    "CancellationLimitReached",
    "ConfigurationError",
    "InvalidRequestId",
    "RequestCancelled",
    "StorageUnavailable",
]

#: JSON-RPC error code of a request that stopped because it was cancelled (as in LSP).
REQUEST_CANCELLED = -32800


class CancellationError(Exception):
    """Root of every exception this package raises."""


class InvalidRequestId(CancellationError, ValueError):
    """A request id that is not an ``int`` or a ``str`` of at most 256 UTF-8 bytes."""


class ConfigurationError(CancellationError, ValueError):
    """A limit or setting, given as an argument or an environment variable, is invalid."""


class CancellationLimitReached(CancellationError):
    """The caller's scope already holds ``max_rows_per_scope`` cancellations.

    This is the only bound that rejects: the global cap evicts instead.
    """

    def __init__(self, scope: str, limit: int) -> None:
        super().__init__(f"scope already holds {limit} outstanding cancellations")
        self.scope = scope
        self.limit = limit


class RequestCancelled(CancellationError):
    """The current request was cancelled; tools raise it to stop early.

    The middleware turns it into the JSON-RPC error ``-32800 Request cancelled``.
    """

    code = REQUEST_CANCELLED

    def __init__(self, reason: str | None = None) -> None:
        super().__init__(reason or "Request cancelled")
        self.reason = reason


class StorageUnavailable(CancellationError):
    """The storage backend (for example Redis) could not be reached in time."""
