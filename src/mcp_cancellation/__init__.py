"""Cross-request, cross-tenant-safe cancellation for MCP servers on Streamable HTTP.

Wrap the MCP app in :class:`CancellationMiddleware`, poll :func:`cancelled` in long tools,
and let clients cancel with ``notifications/cancelled`` from any request of their own
scope, or by closing their stream.

The top level holds what an application uses; extension points live in subpackages:
:mod:`.storage` (the storage contract), :mod:`.signals`, :mod:`.scope`,
:mod:`.integrations`, :mod:`.telemetry` and :mod:`.dashboards`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .__about__ import __version__
from ._context import cancelled, current_token, raise_if_cancelled
from ._errors import (
    REQUEST_CANCELLED,
    CancellationError,
    CancellationLimitReached,
    ConfigurationError,
    InvalidRequestId,
    RequestCancelled,
    StorageUnavailable,
)
from ._extras import lazy
from ._reason import sanitize_reason
from ._registry import CancellationRegistry, CleanupResult
from ._token import RequestToken
from .scope import client_bucket, scope_of
from .storage import MemoryStorage

if TYPE_CHECKING:
    from .integrations._middleware import CancellationMiddleware
    from .storage.redis import RedisStorage

__all__ = [
    "REQUEST_CANCELLED",
    "CancellationError",
    "CancellationLimitReached",
    "CancellationMiddleware",
    "CancellationRegistry",
    "CleanupResult",
    "ConfigurationError",
    "InvalidRequestId",
    "MemoryStorage",
    "RedisStorage",
    "RequestCancelled",
    "RequestToken",
    "StorageUnavailable",
    "__version__",
    "cancelled",
    "client_bucket",
    "current_token",
    "raise_if_cancelled",
    "sanitize_reason",
    "scope_of",
]


# Names whose modules need optional extras load on first use, so that
# ``import mcp_cancellation`` works with the core install alone.
__getattr__ = lazy(
    __name__,
    {"RedisStorage": ".storage.redis", "CancellationMiddleware": ".integrations"},
)
