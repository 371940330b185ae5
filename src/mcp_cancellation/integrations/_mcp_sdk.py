"""The SDK's ``MCPServer``: make a cancelled tool answer JSON-RPC ``-32800 Request cancelled``.

Tools poll :func:`~mcp_cancellation.cancelled` (or call
:func:`~mcp_cancellation.raise_if_cancelled`, which raises
:class:`~mcp_cancellation.RequestCancelled`). The SDK answers an ``MCPError`` raised by a
tool with that error, while any other exception becomes a ``CallToolResult`` with
``isError: true``. So either decorate the tool with :func:`cancellable` (under
``@server.tool()``), or register :class:`CancellationServerMiddleware` once with
``MCPServer(..., middleware=[CancellationServerMiddleware()])``.

Both answer ``{"code": -32800, "message": "Request cancelled"}``, with the sanitised
reason, when there is one, in ``data.reason``. FastMCP has its own module:
:mod:`mcp_cancellation.integrations.fastmcp`.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from .._context import current_token
from .._errors import REQUEST_CANCELLED, RequestCancelled
from .._extras import requires

with requires("mcp", "The SDK helpers (mcp_cancellation.integrations)"):
    from mcp.shared.exceptions import MCPError

if TYPE_CHECKING:
    from mcp.server.context import CallNext, HandlerResult, ServerRequestContext

__all__ = [
    "REQUEST_CANCELLED_MESSAGE",
    "CancellationServerMiddleware",
    "cancellable",
    "cancelled_error",
    "current_reason",
    "is_error_result",
    "request_cancelled",
    "tool_names",
]

F = TypeVar("F", bound=Callable[..., Any])

#: JSON-RPC message of the error a cancelled request answers.
REQUEST_CANCELLED_MESSAGE = "Request cancelled"


def cancelled_error(reason: str | None = None) -> MCPError:
    """The ``MCPError`` a cancelled tool call answers: ``-32800 Request cancelled``."""
    data = {"reason": reason} if reason else None
    return MCPError(REQUEST_CANCELLED, REQUEST_CANCELLED_MESSAGE, data)


def request_cancelled() -> bool:
    """Whether the current request was cancelled, read without marking the token as seen
    by tool code (these helpers are not the tool: see ``RequestToken.observed``)."""
    token = current_token()
    return token is not None and token.cancelled


def current_reason() -> str | None:
    """The reason of the current request's cancellation, if any."""
    token = current_token()
    return token.reason if token is not None else None


def is_error_result(result: object) -> bool:
    """Whether a tool's result (a model or a plain dict) is flagged ``isError``."""
    if isinstance(result, dict):
        return bool(result.get("isError") or result.get("is_error"))
    return bool(getattr(result, "is_error", False))


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


#: The SDK logger that reports a tool's exception as unexpected, with its traceback.
_SDK_TOOL_LOGGER = "mcp.server.mcpserver.server"


def _raised_by_cancellation(exc: BaseException | None) -> bool:
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, RequestCancelled):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


class _QuietCancellations(logging.Filter):
    """Drops the SDK's "raised an unexpected exception" record of a tool that stopped
    because its request was cancelled: that is the expected way to stop."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and _raised_by_cancellation(record.exc_info[1]))


class CancellationServerMiddleware:
    """SDK server middleware (``MCPServer(middleware=[...])`` or ``Server.middleware``):
    a ``tools/call`` that fails while its request is cancelled answers ``-32800``.

    Covers tools that raise :class:`RequestCancelled` without :func:`cancellable`: the SDK
    turns the exception into an error result and logs it as unexpected, with its
    traceback; this middleware answers ``-32800`` instead and keeps that record out of the
    log (a filter on the SDK's logger, added once). A tool that returns normally keeps its
    result.
    """

    def __init__(self) -> None:
        sdk_logger = logging.getLogger(_SDK_TOOL_LOGGER)
        if not any(isinstance(f, _QuietCancellations) for f in sdk_logger.filters):
            sdk_logger.addFilter(_QuietCancellations())

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
            and is_error_result(result)
            and request_cancelled()
        ):
            raise cancelled_error(current_reason())
        return result


def tool_names(server: Any) -> Callable[[], Awaitable[list[str]]]:
    """The names of the tools an ``MCPServer`` has registered, for
    ``CancellationMiddleware(tools=tool_names(server))``: only these become values of the
    ``tool`` label, so a client cannot mint series by calling made-up names."""

    async def names() -> list[str]:
        return [tool.name for tool in await server.list_tools()]

    return names
