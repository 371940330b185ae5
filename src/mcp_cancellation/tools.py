"""Tool-side helpers: make a cancelled tool answer JSON-RPC ``-32800 Request cancelled``.

Tools poll :func:`~mcp_cancellation.cancelled` (or call
:func:`~mcp_cancellation.raise_if_cancelled`, which raises
:class:`~mcp_cancellation.RequestCancelled`). What the client then receives depends on
how the server maps exceptions, so this module offers one way per server flavour:

* the SDK's ``MCPServer``: decorate the tool with :func:`cancellable` (under
  ``@server.tool()``), or register :class:`CancellationServerMiddleware` once with
  ``MCPServer(..., middleware=[CancellationServerMiddleware()])``. The SDK answers an
  ``MCPError`` raised by a tool with that error, while any other exception becomes a
  ``CallToolResult`` with ``isError: true``;
* FastMCP: ``FastMCP(..., middleware=[fastmcp_middleware()])``. FastMCP masks every
  exception a tool raises (``MCPError`` included) into an error *result*, so the
  conversion has to happen in its middleware chain, above the masking.

Both answer ``{"code": -32800, "message": "Request cancelled"}``, with the sanitised
reason, when there is one, in ``data.reason``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from mcp.shared.exceptions import MCPError

from .context import cancelled, current_token
from .errors import REQUEST_CANCELLED, RequestCancelled

if TYPE_CHECKING:
    from fastmcp.server.middleware import Middleware as FastMCPMiddleware
    from mcp.server.context import CallNext, HandlerResult, ServerRequestContext

__all__ = [
    "CancellationServerMiddleware",
    "cancellable",
    "cancelled_error",
    "fastmcp_middleware",
]

F = TypeVar("F", bound=Callable[..., Any])

#: JSON-RPC message of the error a cancelled request answers.
REQUEST_CANCELLED_MESSAGE = "Request cancelled"


def cancelled_error(reason: str | None = None) -> MCPError:
    """The ``MCPError`` a cancelled tool call answers: ``-32800 Request cancelled``."""
    data = {"reason": reason} if reason else None
    return MCPError(REQUEST_CANCELLED, REQUEST_CANCELLED_MESSAGE, data)


def _current_reason() -> str | None:
    token = current_token()
    return token.reason if token is not None else None


def _cancel_cause(exc: BaseException) -> RequestCancelled | None:
    """The :class:`RequestCancelled` in *exc*'s cause/context chain, if any."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, RequestCancelled):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def cancellable(fn: F) -> F:
    """Decorate a tool (sync or async) so that :class:`RequestCancelled` raised inside it
    answers JSON-RPC ``-32800`` instead of an error result.

    Put it *under* the server's registration decorator; the signature is kept, so the
    SDK still derives the tool's input schema from it::

        @server.tool()
        @cancellable
        async def slow_count(seconds: int, ctx: Context) -> str:
            for i in range(seconds):
                raise_if_cancelled()
                ...
    """
    if inspect.iscoroutinefunction(fn):
        async_fn = cast("Callable[..., Awaitable[Any]]", fn)

        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return await async_fn(*args, **kwargs)
            except RequestCancelled as exc:
                raise cancelled_error(exc.reason) from exc

        return cast("F", async_wrapper)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except RequestCancelled as exc:
            raise cancelled_error(exc.reason) from exc

    return cast("F", wrapper)


def _is_error_result(result: object) -> bool:
    if isinstance(result, dict):
        return bool(result.get("isError") or result.get("is_error"))
    return bool(getattr(result, "is_error", False))


class CancellationServerMiddleware:
    """SDK server middleware (``MCPServer(middleware=[...])`` or ``Server.middleware``):
    a ``tools/call`` that fails while its request is cancelled answers ``-32800``.

    Covers tools that raise :class:`RequestCancelled` without :func:`cancellable` (the SDK
    first turns the exception into an error result, logging it as unexpected; prefer the
    decorator to keep logs quiet). A tool that returns normally keeps its result.
    """

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        try:
            result = await call_next(ctx)
        except RequestCancelled as exc:
            raise cancelled_error(exc.reason) from exc
        if (
            ctx.request_id is not None
            and ctx.method == "tools/call"
            and cancelled()
            and _is_error_result(result)
        ):
            raise cancelled_error(_current_reason())
        return result


def fastmcp_middleware() -> FastMCPMiddleware:
    """A FastMCP middleware that makes a cancelled ``tools/call`` answer ``-32800``.

    ``FastMCP("name", middleware=[fastmcp_middleware()])`` (or ``mcp.add_middleware``).
    A tool call that raises while its request is cancelled (typically
    :class:`RequestCancelled` from :func:`~mcp_cancellation.raise_if_cancelled`) answers
    the JSON-RPC error instead of FastMCP's masked error result.
    """
    from fastmcp.exceptions import ToolError
    from fastmcp.server.middleware import Middleware

    class _FastMCPCancellation(Middleware):
        async def on_call_tool(self, context: Any, call_next: Any) -> Any:
            try:
                result = await call_next(context)
            except RequestCancelled as exc:
                raise cancelled_error(exc.reason) from exc
            except ToolError as exc:
                cause = _cancel_cause(exc)
                if cause is not None:
                    raise cancelled_error(cause.reason) from exc
                if cancelled():
                    raise cancelled_error(_current_reason()) from exc
                raise
            if cancelled() and _is_error_result(result):
                raise cancelled_error(_current_reason())
            return result

    _FastMCPCancellation.__name__ = _FastMCPCancellation.__qualname__ = "FastMCPCancellation"
    return _FastMCPCancellation()
