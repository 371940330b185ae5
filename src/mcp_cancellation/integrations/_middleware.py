"""``CancellationMiddleware``: cross-request cancellation in front of any MCP ASGI app.

Pure ASGI, placed around the SDK's ``streamable_http_app()`` or FastMCP's ``http_app()``.
For each POST on the MCP path it reads the body (up to ``max_body_bytes``), re-injects it
byte for byte for the inner app, and:

* tracks every JSON-RPC request with an id (``initialize`` aside: only counted) under the
  caller's scope for as long as the inner app serves it, so that
  :func:`~mcp_cancellation.cancelled` and :func:`~mcp_cancellation.raise_if_cancelled`
  work in tool code, and untracks and clears it whatever the outcome;
* answers ``notifications/cancelled`` (handshake protocol versions, up to 2025-11-25) by
  recording a cancellation for the id only if it is in flight in the caller's own scope;
* treats a client disconnect (``http.disconnect`` before the response ended, or a failing
  ``send``) as the cancellation of that request, for every protocol version and both
  response modes, and cancels the inner app's work if it has not ended
  ``stream_cancel_timeout`` seconds later;
* passes everything else through untouched, and never buffers a response.

The caller's scope is :func:`~mcp_cancellation.scope_of` of the ASGI scope, after an
optional ``session_resolver``, or else a session id the server issued (a stateful server's
``Mcp-Session-Id``, learned from its answers to ``initialize``), put a server-validated
session id in it. A ``tools/call`` carries its tool's name on the token
(:attr:`~mcp_cancellation.RequestToken.tool`, the ``tool`` metric label) when *tools* lists
it, else ``other``.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal

from .._asgi import (
    ASGIApp,
    Message,
    Receive,
    Scope,
    Send,
    TooLarge,
    header,
    read_body,
    route_path,
)
from .._config import int_limit, seconds
from .._errors import ConfigurationError, InvalidRequestId, StorageUnavailable
from .._extras import requires
from .._registry import CancellationRegistry
from .._token import OTHER_TOOL
from ..logs import plain_beside_rich
from ..scope import PRINCIPAL_KEY, SESSION_KEY, client_bucket, scope_of, trusted_networks

if TYPE_CHECKING:
    from mcp.server.transport_security import (
        TransportSecurityMiddleware,
        TransportSecuritySettings,
    )
from . import _jsonrpc
from ._exchange import DISCONNECT_REASON, Exchange, Watchlists, operation, replay
from ._jsonrpc import (
    INITIALIZE_METHOD,
    OTHER,
    TOOLS_CALL_METHOD,
    UNTRACKED_METHODS,
    classify,
)
from ._notifications import Front, answer_cancelled
from ._sessions import SESSION_HEADER, IssuedSessions, session_open
from ._transport import Transport, find_transport

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "DisconnectPolicy",
    "DISCONNECT_REASON",
    "OTHER_TOOL",
    "TOOLS_REFRESH_SECONDS",
    "ToolNames",
    "ASGIApp",
    "CancellationMiddleware",
    "Message",
    "Receive",
    "Scope",
    "Send",
]

logger = logging.getLogger("mcp_cancellation.asgi")


#: Same default as the SDK's ``max_request_body_size`` (4 MiB).
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
#: How often a ``tools`` callable is asked again for the server's tool names.
TOOLS_REFRESH_SECONDS = 5.0
#: What ``tools=`` accepts: the names, or a callable (sync or async) that lists them, such
#: as ``integrations.mcp_sdk.tool_names(server)``.
ToolNames = Iterable[str] | Callable[[], Iterable[str] | Awaitable[Iterable[str]]]
#: When a client's disconnect cancels its request (``CancellationMiddleware(disconnect_cancels=)``).
DisconnectPolicy = Literal["auto", "always"]


class CancellationMiddleware:
    """Cross-request, scope-safe cancellation for an MCP app on Streamable HTTP.

    ``registry`` defaults to a new :class:`~mcp_cancellation.CancellationRegistry` (which
    the middleware then closes on shutdown). ``path`` is the MCP endpoint. Proxy headers
    are believed only from ``trusted_proxies`` (addresses or CIDR blocks).
    ``stream_cancel_timeout`` is how long a request whose client disconnected may keep
    running before its work is cancelled (``None``: never). ``session_resolver`` returns
    a session id the *server* has validated for the request, or ``None``. Bodies larger
    than ``max_body_bytes`` are refused with 413, as the SDK does (default: the wrapped
    SDK app's ``max_request_body_size``, else 4 MiB). The middleware answers
    ``notifications/cancelled`` in front of the SDK and checks it as the SDK would: by
    default with the Host/Origin allow-list (DNS-rebinding protection) and the response
    mode of the SDK app it wraps, found in that app; ``transport_security`` replaces the
    allow-list. With ``issued_sessions`` (the default), a request carrying an
    ``Mcp-Session-Id`` that the server issued in its answer to ``initialize`` is scoped by
    that session (a stateful server's sessions at one address stay apart, as in the SDK);
    ``session_resolver`` comes first. ``disconnect_cancels`` says when a client that closes
    its stream cancels its request: ``"auto"`` (the default) as each protocol version says,
    always at 2026-07-28 and later ("the server MUST treat a client disconnect as
    cancellation"), and at earlier versions only where the stream cannot be resumed (a
    stateless server, JSON responses, or no event store; 2025-11-25: a disconnection
    "SHOULD NOT be interpreted as the client cancelling"); ``"always"``: every disconnect
    cancels. Invalid settings raise
    :class:`~mcp_cancellation.ConfigurationError` here.

    The janitor of the registry starts on ASGI lifespan startup (or at the first request
    when the server sends no lifespan events) and stops on shutdown.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        registry: CancellationRegistry | None = None,
        path: str = "/mcp",
        trusted_proxies: Sequence[str] = (),
        stream_cancel_timeout: float | None = 10.0,
        session_resolver: Callable[[Scope], str | None] | None = None,
        max_body_bytes: int | None = None,
        transport_security: TransportSecuritySettings | None = None,
        tools: ToolNames | None = None,
        issued_sessions: bool = True,
        disconnect_cancels: DisconnectPolicy = "auto",
    ) -> None:
        if not isinstance(path, str) or not path.startswith("/"):
            raise ConfigurationError(f"path must start with '/', not {path!r}")
        if disconnect_cancels not in ("auto", "always"):
            raise ConfigurationError(
                f"disconnect_cancels must be 'auto' or 'always', not {disconnect_cancels!r}"
            )
        self.disconnect_cancels = disconnect_cancels
        self._checks: set[asyncio.Task[None]] = set()
        stream_cancel_timeout = seconds(
            "stream_cancel_timeout", stream_cancel_timeout, None, None, zero=True
        )
        max_body_bytes = int_limit("max_body_bytes", max_body_bytes, "", None)
        if session_resolver is not None and not callable(session_resolver):
            raise ConfigurationError("session_resolver must be callable")
        self._tool_source: Callable[[], Any] | None = None
        self._tool_names: frozenset[str] = frozenset()
        self._tools_read_at = -math.inf
        if callable(tools):
            self._tool_source = tools
        elif tools is not None:
            if isinstance(tools, str) or not all(isinstance(t, str) for t in tools):
                raise ConfigurationError("tools must be tool names, or a callable listing them")
            self._tool_names = frozenset(tools)
        self.app = app
        self._owns_registry = registry is None
        self.registry = registry if registry is not None else CancellationRegistry()
        self.path = path.rstrip("/") or "/"
        self.trusted_proxies = trusted_networks(trusted_proxies)
        self.stream_cancel_timeout = stream_cancel_timeout
        self.session_resolver = session_resolver
        self._body_limit_given = max_body_bytes is not None
        #: The POST body limit: as given, else the wrapped SDK app's (once found), else
        #: the SDK's default.
        self.max_body_bytes = DEFAULT_MAX_BODY_BYTES if max_body_bytes is None else max_body_bytes
        self._security: TransportSecurityMiddleware | None = None
        if transport_security is not None:
            with requires("mcp", "CancellationMiddleware(transport_security=...)"):
                from mcp.server.transport_security import TransportSecurityMiddleware

            self._security = TransportSecurityMiddleware(transport_security)
        #: The SDK transport's session manager in ``app``, found at the first notification
        #: that needs it (its response mode; its Host/Origin settings if none are given).
        self._transport: Transport | None = None
        self._transport_unsearchable = False  # the search raised once: not tried again
        #: The session ids the server issued (``issued_sessions``), else ``None``.
        self.sessions: IssuedSessions | None = IssuedSessions() if issued_sessions else None
        self._started = False  # the first POST on the MCP path has been seen
        self.watchlists = Watchlists()  # starts the disconnect watchers of long requests

    def __repr__(self) -> str:
        return f"<CancellationMiddleware path={self.path!r} registry={self.registry!r}>"

    # -- ASGI entry ----------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            method = scope.get("method")
            if method == "POST":
                if scope.get("path") == self.path or self._on_mcp_path(scope):
                    exchange = await self._post(scope, receive, send)
                    if exchange is None:
                        return  # answered, or passed through
                    # A tracked request's app runs in this very frame: each time the app
                    # resumes, it passes through one coroutine of the middleware, not three.
                    async with exchange.context:
                        app_receive, app_send = exchange.begin()
                        try:
                            await self.app(scope, app_receive, app_send)
                        except asyncio.CancelledError:
                            if not exchange.killed_by_timer():
                                raise
                        finally:
                            exchange.end()
                    return
            elif method == "DELETE" and self.sessions and self._on_mcp_path(scope):
                session_id = header(scope, SESSION_HEADER)
                if session_id is not None:  # the end of a session: forget it once accepted
                    send = self.sessions.forgetting(session_id, send)
        elif kind == "lifespan":
            await self._lifespan(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _on_mcp_path(self, scope: Scope) -> bool:
        """Whether an HTTP request is for the MCP endpoint: its path, with a trailing
        slash, or under the root path."""
        path = scope.get("path")
        return path == self.path or self._on_path(path) or self._on_path(route_path(scope))

    def _on_path(self, path: object) -> bool:
        if not isinstance(path, str):
            return False
        return path == self.path or (path.endswith("/") and path.rstrip("/") == self.path)

    def caller_scope(self, scope: Scope) -> str:
        """The cancellation scope of an HTTP request (after the session resolver)."""
        resolver = self.session_resolver
        if resolver is not None:
            try:
                session = resolver(scope)
            except Exception:  # a failing resolver must not fail the request
                logger.exception("session_resolver failed; scoping by principal or address")
                session = None
            if isinstance(session, str) and session:
                scope[SESSION_KEY] = session
        sessions = self.sessions
        transport = self._transport
        if (
            sessions is not None
            and SESSION_KEY not in scope
            and (sessions or (transport is not None and transport.stateful))
        ):
            session_id = header(scope, SESSION_HEADER)
            if session_id is not None and session_open(session_id, sessions, transport):
                scope[SESSION_KEY] = session_id
        if (
            not self.trusted_proxies
            and SESSION_KEY not in scope
            and PRINCIPAL_KEY not in scope
            and "user" not in scope
            and scope.get("type") == "http"
        ):
            # The common case, an anonymous caller with no proxy: what scope_of() returns,
            # without parsing the same address again for every request.
            client = scope.get("client")
            return _ip_scope(client[0] if client else None)
        return scope_of(scope, trusted_proxies=self.trusted_proxies)

    # -- lifespan ------------------------------------------------------------------------

    async def _lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        registry = self.registry

        async def lifespan_receive() -> Message:
            message = await receive()
            kind = message.get("type")
            if kind == "lifespan.startup":
                plain_beside_rich()  # before the storage check's warning, if any
                registry.start_janitor()
                # In the background (a stalled storage must not hold the start-up): a
                # storage that is down is reported now, not at the first request.
                self._checks.add(asyncio.get_running_loop().create_task(self._check_storage()))
            elif kind == "lifespan.shutdown":
                try:
                    await registry.shutdown()  # (running tasks drain first)
                    if self._owns_registry:
                        await registry.aclose()
                    else:
                        await registry.stop_janitor()
                except Exception:  # never fail the server's shutdown over it
                    logger.exception("stopping the cancellation janitor failed")
            return message

        await self.app(scope, lifespan_receive, send)

    async def _check_storage(self) -> None:
        try:
            await self.registry.storage.ping()
        except StorageUnavailable:
            pass  # the storage has logged it, with the cause
        except Exception:  # a storage's own bug: say so, never fail the start-up
            logger.exception("checking the cancellation storage at start-up failed")
        finally:
            task = asyncio.current_task()
            if task is not None:
                self._checks.discard(task)

    # -- POST on the MCP path ------------------------------------------------------------

    async def _post(self, scope: Scope, receive: Receive, send: Send) -> Exchange | None:
        """Read and classify a POST's body; answer or pass through everything but a
        request to track, which is returned (``None`` when handled here)."""
        if not self._started:
            # The first POST: the app has started (a lifespan startup has completed), so
            # the SDK's session manager exists if there is one. The janitor too, unless the
            # server sends no lifespan events (start_janitor() is idempotent). Logging is
            # configured by now too: under Rich alone, the package's lines go plain.
            self._started = True
            plain_beside_rich()
            self.registry.start_janitor()
            self._find_transport()

        # The whole body (the SDK too reads it all before parsing it).
        try:
            body, trailing = await read_body(scope, receive, self.max_body_bytes)
        except TooLarge:
            await self._too_large(send)
            return None
        kind, request_id, params, method = OTHER if trailing is not None else classify(body)
        if kind == "request":
            return await self._exchange(scope, receive, send, body, request_id, params, method)
        if kind == "cancel" and _jsonrpc.is_handshake_version(
            header(scope, b"mcp-protocol-version")
        ):
            # The transport first: finding it may also set the SDK app's Host/Origin check.
            transport = self._transport or self._find_transport()
            front = Front(self.app, self.registry, self.caller_scope, transport, self._security)
            await answer_cancelled(front, scope, receive, send, body, params)
        elif method == INITIALIZE_METHOD:
            if self.sessions is not None and (
                self._transport is None or self._transport.session_open("") is None
            ):
                # A server whose session table cannot be read names its sessions in its
                # answers: remember them.
                send = self.sessions.learning(send)
            # Not tracked (the spec forbids cancelling it), but counted in request.ended,
            # with the protocol version it asks for (it has no version header).
            asked = params.get("protocolVersion") if isinstance(params, dict) else None
            version = asked if isinstance(asked, str) else header(scope, b"mcp-protocol-version")
            async with self.registry.request(
                None, self.caller_scope(scope), labels=operation(method, version)
            ):
                await self.app(scope, replay(body, trailing, receive), send)
        else:
            await self.app(scope, replay(body, trailing, receive), send)
        return None

    async def _exchange(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        body: bytes,
        request_id: object,
        params: object,
        method: str | None,
    ) -> Exchange:
        """A request to track: its tool label, its caller's scope, its registry block."""
        tool = None
        if method == TOOLS_CALL_METHOD:
            if (
                self._tool_source is not None
                and time.monotonic() - self._tools_read_at > TOOLS_REFRESH_SECONDS
            ):
                await self._read_tools()
            # The tool's name if the server registered it, else ``other``: a client must
            # not mint label values with made-up names.
            name = params.get("name") if isinstance(params, dict) else None
            tool = name if isinstance(name, str) and name in self._tool_names else OTHER_TOOL
        caller = self.caller_scope(scope)
        version = header(scope, b"mcp-protocol-version")
        if method in UNTRACKED_METHODS:
            request_id = None  # counted and scoped, never in the table (one round trip less)
        try:
            context = self.registry.request(
                request_id, caller, tool=tool, labels=operation(method, version)
            )
        except InvalidRequestId:
            # An id the registry cannot key (a string over 256 UTF-8 bytes, a float, ...):
            # the SDK answers or serves it as it sees fit. Such a call is not in the table
            # (no notification can name it: its id is refused), but a disconnect still
            # cancels it, like any other call.
            context = self.registry.request(
                None, caller, tool=tool, labels=operation(method, version)
            )
        return Exchange(self, receive, send, body, context, self._disconnect_cancels_request(scope))

    async def _too_large(self, send: Send) -> None:
        await _jsonrpc.send_error(send, 413, _jsonrpc.INVALID_REQUEST, "Request body too large")

    def _disconnect_cancels_request(self, scope: Scope) -> bool:
        """Whether the client closing this request's stream cancels it (see
        ``disconnect_cancels``): yes at 2026-07-28 and later, and at earlier versions unless
        the SDK app can resume the stream (stateful, SSE responses, an event store)."""
        if self.disconnect_cancels == "always":
            return True
        if not _jsonrpc.is_handshake_version(header(scope, b"mcp-protocol-version")):
            return True
        return self._transport is None or not self._transport.resumable

    def _find_transport(self) -> Transport | None:
        """The SDK transport inside the wrapped app, once it exists; its Host/Origin
        settings and body limit are taken up unless given."""
        if self._transport_unsearchable:
            return None
        try:
            transport = find_transport(self.app, self.path)
        except Exception:  # an app whose attributes misbehave: serve it, check less
            logger.exception("looking for the SDK's session manager in the app failed")
            self._transport_unsearchable = True
            return None
        if transport is not None:
            self._transport = transport
            manager = transport.manager
            limit = getattr(manager, "max_request_body_size", None)
            if not self._body_limit_given and isinstance(limit, int) and limit > 0:
                self.max_body_bytes = limit
            settings = manager.security_settings
            if self._security is None and settings is not None:
                from mcp.server.transport_security import TransportSecurityMiddleware

                self._security = TransportSecurityMiddleware(settings)
        return transport

    # -- tracked requests ----------------------------------------------------------------

    async def _read_tools(self) -> None:
        """Ask the ``tools`` callable for the server's tool names (at most every
        :data:`TOOLS_REFRESH_SECONDS`); on failure the names stay as they were."""
        assert self._tool_source is not None
        self._tools_read_at = time.monotonic()
        try:
            listed = self._tool_source()
            if inspect.isawaitable(listed):
                listed = await listed
            self._tool_names = frozenset(str(name) for name in listed)
        except Exception:
            logger.exception("listing the server's tools failed (tool labels stay as they were)")


@functools.lru_cache(maxsize=4096)
def _ip_scope(address: str | None) -> str:
    return f"ip:{client_bucket(address)}"
