"""The SDK transport behind the middleware, found in the app it wraps (private).

The middleware answers ``notifications/cancelled`` in front of the SDK, so it must check
such a POST as the SDK's transport would: the same Host/Origin allow-list (DNS-rebinding
protection, which the SDK turns on by itself for a loopback server) and the same
``Accept`` rule, which depends on the response mode. Both are public attributes of the
SDK's ``StreamableHTTPSessionManager``, reachable from the app through public attributes
too: middleware ``app`` chains, ``routes``, and the MCP route's endpoint, whose
``session_manager`` it is. FastMCP sets that attribute at lifespan startup, so the search
runs when a notification needs it, until it finds the manager.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

__all__ = ["MAX_DEPTH", "find_session_manager"]

#: How many wrapping layers (middleware, each with an ``app``) the search goes through.
MAX_DEPTH = 32


def find_session_manager(app: object, path: str) -> StreamableHTTPSessionManager | None:
    """The SDK session manager serving *path* inside *app*, or ``None`` (not the SDK's
    Streamable HTTP app, not started yet, or the SDK is not installed)."""
    try:
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    except ImportError:  # the middleware itself does not need the SDK
        return None
    paths = (path, path.rstrip("/") + "/")
    node: object = app
    for _ in range(MAX_DEPTH):
        routes = getattr(node, "routes", None)
        if isinstance(routes, list):  # a Starlette app or router: the end of the chain
            for route in routes:
                if getattr(route, "path", None) in paths:
                    endpoint = getattr(route, "endpoint", None)
                    manager = getattr(endpoint, "session_manager", None)
                    if isinstance(manager, StreamableHTTPSessionManager):
                        return manager
            return None
        node = getattr(node, "app", None)
        if node is None:
            return None
    return None
