"""The SDK transport behind the middleware, found in the app it wraps (private).

The middleware answers ``notifications/cancelled`` in front of the SDK, so it must check
such a POST as the SDK's transport would: the same Host/Origin allow-list (DNS-rebinding
protection, which the SDK turns on by itself for a loopback server) and the same
``Accept`` rule, which depends on the response mode; and it reads bodies up to the same
limit. All are public attributes of the SDK's ``StreamableHTTPSessionManager``, reachable
from the app through public attributes too: middleware ``app`` chains, ``routes``, and
the MCP route's endpoint (or the app it wraps, such as the SDK's
``RequireAuthMiddleware``), whose ``session_manager`` it is. FastMCP sets that attribute
at lifespan startup, so the middleware searches at the first POST, and again at a
notification until it finds the manager.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from mcp.server.transport_security import TransportSecuritySettings

__all__ = ["MAX_DEPTH", "Transport", "find_transport", "loopback_transport_security"]

#: How many wrapping layers (middleware, each with an ``app``) the search goes through.
MAX_DEPTH = 32


class Transport(NamedTuple):
    """The SDK transport serving the MCP path, as found in the app."""

    manager: StreamableHTTPSessionManager
    #: The route's endpoint wraps the transport's app (the SDK's and FastMCP's
    #: ``RequireAuthMiddleware`` when the server requires authentication): that layer
    #: may refuse a POST before the SDK sees it.
    guarded: bool

    @property
    def resumable(self) -> bool:
        """Whether a client may resume a stream it closed (stateful, SSE responses, an
        event store): closing it then need not mean the request is abandoned."""
        manager = self.manager
        return not (manager.stateless or manager.json_response or manager.event_store is None)

    @property
    def stateful(self) -> bool:
        """Whether the SDK issues sessions."""
        return not self.manager.stateless

    def session_open(self, session_id: str) -> bool | None:
        """Whether the SDK holds *session_id* as an open session, read from its own
        session table (``_server_instances``, a private attribute of the SDK's manager,
        pinned by tests/integrations/test_session_scopes.py), so that no second copy of
        it can be forgotten while the SDK still accepts the session; ``None`` when the
        table cannot be read (a release that moved it)."""
        table = getattr(self.manager, "_server_instances", None)
        return session_id in table if isinstance(table, dict) else None


def find_transport(app: object, path: str) -> Transport | None:
    """The SDK transport serving *path* inside *app*, or ``None`` (not the SDK's
    Streamable HTTP app, not started yet, or the SDK is not installed). The search goes
    through middleware (``app`` chains) and into apps mounted under a prefix of *path*."""
    try:
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    except ImportError:  # the middleware itself does not need the SDK
        return None
    return _search(app, path.rstrip("/") or "/", StreamableHTTPSessionManager, MAX_DEPTH)


def _search(
    node: object, path: str, manager_type: type[StreamableHTTPSessionManager], budget: int
) -> Transport | None:
    while budget > 0 and node is not None:
        budget -= 1
        routes = getattr(node, "routes", None)
        if isinstance(routes, list):  # a Starlette app or router: the end of this chain
            for route in routes:
                route_path = getattr(route, "path", None)
                if not isinstance(route_path, str):
                    continue
                if route_path.rstrip("/") == path.rstrip("/"):
                    # The endpoint, or an app it wraps (with auth, the SDK's route is
                    # RequireAuthMiddleware around the transport's app).
                    endpoint = getattr(route, "endpoint", None)
                    guarded = False
                    while budget > 0 and endpoint is not None:
                        budget -= 1
                        manager = getattr(endpoint, "session_manager", None)
                        if isinstance(manager, manager_type):
                            return Transport(manager, guarded)
                        endpoint = getattr(endpoint, "app", None)
                        guarded = True
                elif route_path and path.startswith(route_path + "/"):
                    # a Mount("/api", app): the rest of the path inside its app
                    found = _search(
                        getattr(route, "app", None), path[len(route_path) :], manager_type, budget
                    )
                    if found is not None:
                        return found
            return None
        node = getattr(node, "app", None)
    return None


def loopback_transport_security(host: str) -> TransportSecuritySettings | None:
    """The DNS-rebinding protection the SDK turns on by itself for a loopback *host*,
    built here so that the SDK app and the middleware share one instance."""
    from mcp.server.transport_security import TransportSecuritySettings

    if host not in ("127.0.0.1", "localhost", "::1"):
        return None
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
    )
