"""FastMCP: make a cancelled tool answer JSON-RPC ``-32800 Request cancelled``, quietly.

``FastMCP("name", middleware=[fastmcp_middleware()])`` (or ``mcp.add_middleware``).
FastMCP masks every exception a tool raises (``MCPError`` included) into an error
*result*, and logs each one with its traceback, so the conversion happens in FastMCP's
middleware chain, above the masking:

* while a tool runs under this middleware, :func:`~mcp_cancellation.raise_if_cancelled`
  raises :class:`FastMCPRequestCancelled`: a :class:`~mcp_cancellation.RequestCancelled`
  that is also a FastMCP error logged at DEBUG, so FastMCP passes it up unmasked and
  without a traceback, and the middleware answers ``-32800``;
* a tool call that fails in any other way while its request is cancelled answers
  ``-32800`` too; one that returns normally keeps its result.

The cancellation itself is logged once, by :class:`~mcp_cancellation.CancellationMiddleware`
when the request ends (see the guide).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .._errors import RequestCancelled
from .._extras import requires
from .._token import cancellation_error_type

with requires("fastmcp", "mcp_cancellation.integrations.fastmcp"):
    # FastMCP first: without it, the fastmcp extra is the one to name.
    from fastmcp.exceptions import FastMCPError, ToolError
    from fastmcp.server.middleware import Middleware

    from ._mcp_sdk import cancelled_error, current_reason, is_error_result, request_cancelled

if TYPE_CHECKING:
    from fastmcp.server.middleware import MiddlewareContext

__all__ = ["FastMCPRequestCancelled", "fastmcp_middleware", "tool_names"]


class FastMCPRequestCancelled(RequestCancelled, FastMCPError):
    """:class:`~mcp_cancellation.RequestCancelled` as FastMCP sees it: a FastMCP error
    logged at DEBUG without a traceback, and re-raised to the middleware unmasked."""

    def __init__(self, reason: str | None = None) -> None:
        super().__init__(reason)
        self.log_level = logging.DEBUG


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


class FastMCPCancellation(Middleware):
    """The FastMCP middleware :func:`fastmcp_middleware` returns."""

    async def on_call_tool(self, context: MiddlewareContext[Any], call_next: Any) -> Any:
        reset = cancellation_error_type.set(FastMCPRequestCancelled)
        try:
            result = await call_next(context)
        except RequestCancelled as exc:
            raise cancelled_error(exc.reason) from exc
        except ToolError as exc:
            cause = _cancel_cause(exc)
            if cause is not None:
                raise cancelled_error(cause.reason) from exc
            if request_cancelled():
                raise cancelled_error(current_reason()) from exc
            raise
        finally:
            cancellation_error_type.reset(reset)
        if is_error_result(result) and request_cancelled():
            raise cancelled_error(current_reason())
        return result


def fastmcp_middleware() -> FastMCPCancellation:
    """A FastMCP middleware that makes a cancelled ``tools/call`` answer ``-32800``.

    ``FastMCP("name", middleware=[fastmcp_middleware()])`` (or ``mcp.add_middleware``).
    """
    return FastMCPCancellation()


def tool_names(server: Any) -> Callable[[], Awaitable[list[str]]]:
    """The names of the tools a ``FastMCP`` server has registered (its own listing, without
    its middleware), for ``CancellationMiddleware(tools=tool_names(server))``."""

    async def names() -> list[str]:
        return [tool.name for tool in await server.list_tools(run_middleware=False)]

    return names
