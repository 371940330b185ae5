"""Integrations with the servers this package sits in front of or inside.

* :class:`CancellationMiddleware`: pure ASGI, in front of any MCP app on Streamable HTTP
  (the layer that knows HTTP and JSON-RPC); it needs no extra;
* tool-side helpers for the SDK's ``MCPServer`` (``[mcp]``, loaded on first use):
  :func:`cancellable`, :class:`CancellationServerMiddleware`, :func:`tool_names` and the
  rest;
* :mod:`.fastmcp`: the FastMCP middleware (``[fastmcp]``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._extras import lazy
from ._middleware import DEFAULT_MAX_BODY_BYTES, CancellationMiddleware, DisconnectPolicy
from ._transport import loopback_transport_security

if TYPE_CHECKING:
    from ._mcp_sdk import CancellationServerMiddleware, cancellable, cancelled_error, tool_names

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "CancellationMiddleware",
    "CancellationServerMiddleware",
    "DisconnectPolicy",
    "cancellable",
    "cancelled_error",
    "loopback_transport_security",
    "tool_names",
]

# The SDK helpers need the mcp extra; the middleware does not.
_SDK_HELPERS = ("CancellationServerMiddleware", "cancellable", "cancelled_error", "tool_names")
__getattr__ = lazy(__name__, dict.fromkeys(_SDK_HELPERS, "._mcp_sdk"))
