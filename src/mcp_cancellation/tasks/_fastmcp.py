"""``FastMCPTasksExtension``: this package's tasks for FastMCP servers, through FastMCP's
own extension interface (``mcp.add_extension(...)``, SEP-2133).

A thin adapter over the task core of :class:`~mcp_cancellation.tasks.TasksExtension`:
the same table, runs, bounds, liveness, shutdown, signals and protocol rows. What is
FastMCP's own: each tool's task support comes from its ``task=`` declaration
(``task=True``, ``TaskConfig(mode=..., poll_interval=...)``), the tool body runs through
FastMCP's continuation under a request context whose session is the task's (so
``ctx.report_progress``, ``ctx.elicit``, sampling and logging behave as in the SDK
adapter), and the drain runs in the extension's ``lifespan()``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any

from .._extras import requires
from ._extension import IDENTIFIER, TasksExtension, TaskSupport

with requires("fastmcp", "mcp_cancellation.tasks.FastMCPTasksExtension"):
    from fastmcp.exceptions import ToolError
    from fastmcp.server.dependencies import bind_request_context
    from fastmcp.server.extensions import MethodBinding, ServerExtension
    from fastmcp.tools.base import InputRequiredToolResult, ToolResult
    from mcp.shared.exceptions import MCPError
    from mcp_types import CallToolRequestParams, CallToolResult, ContentBlock, TextContent
    from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from fastmcp.server.context import Context
    from fastmcp.server.extensions import ToolCallContinuation, ToolCallOutcome
    from mcp.server.context import ServerRequestContext

    from .._registry import CancellationRegistry

__all__ = ["FastMCPTasksExtension"]

#: The progress token a task's run puts in its request's ``_meta``: FastMCP sends
#: ``ctx.report_progress`` to the session only for a request that has one, and the
#: task's session turns it into the task's ``statusMessage``.
PROGRESS_TOKEN = "io.modelcontextprotocol/tasks"
#: The input window of a tool whose return annotation names ``InputRequiredResult``.
ASK_FIRST_WINDOW = 0.05
#: The protocol version a task's tool body sees (see ``_tool_body``).
HANDSHAKE_ERA = "2025-11-25"


class CreateTaskResult(BaseModel):
    """The handle a task's ``tools/call`` answers with (SEP-2663), as a model FastMCP
    serializes as it is."""

    model_config = ConfigDict(extra="allow")


class FastMCPTasksExtension(ServerExtension):
    """Tasks (SEP-2663) for a FastMCP server, on the registry's table.

    ``mcp.add_extension(FastMCPTasksExtension(registry))``, with the
    :class:`~mcp_cancellation.CancellationMiddleware` of *registry* in front of
    ``mcp.http_app()``. Tools opt in as FastMCP has them do (``@mcp.tool(task=True)``
    or ``task=TaskConfig(mode="required" | "optional", poll_interval=...)``). The
    keyword options are :class:`~mcp_cancellation.tasks.TasksExtension`'s (less
    ``tools`` and ``poll_interval``, which each tool's ``TaskConfig`` gives).
    """

    identifier = IDENTIFIER

    def __init__(self, registry: CancellationRegistry, **options: Any) -> None:
        for taken in ("tools", "poll_interval"):
            if taken in options:
                raise TypeError(f"{taken}= is each tool's own: @mcp.tool(task=TaskConfig(...))")
        self.core = TasksExtension(registry, tools={}, **options)
        self.core._middleware_seen = True  # (its middleware is installed at registration)

    async def _middleware(self, ctx: ServerRequestContext[Any, Any], call_next: Any) -> Any:
        """The core's server middleware, each tool's task support read from FastMCP."""
        if ctx.method == "tools/list":
            await self._read_support()
        return await self.core(ctx, call_next)

    async def _read_support(self) -> None:
        """Each tool's task support, as its ``task=`` declares it (for tools/list, and
        the ``tool`` label of a dead worker's task that this worker ends)."""
        tools = await self.server.list_tools(run_middleware=False)
        self.core.task_support.update((tool.name, tool.task_config.mode) for tool in tools)

    @property
    def running(self) -> int:
        """How many tasks' tools run in this process now."""
        return self.core.running

    def clone(self) -> FastMCPTasksExtension:
        # (The core holds a registry, loops and tasks: a clone shares them, unbound.)
        twin = object.__new__(FastMCPTasksExtension)
        twin.core = self.core
        return twin

    def methods(self) -> Sequence[MethodBinding]:
        # (Called at registration, with the server bound: the SDK-level middleware that
        # states each tool's task support in tools/list, whose 2026-07-28 form the SDK
        # writes without it, and gates subscriptions/listen.)
        lowlevel = getattr(self.server, "_mcp_server", None)
        chain = getattr(lowlevel, "middleware", None)
        if isinstance(chain, list) and not any(m is self._middleware for m in chain):
            chain.append(self._middleware)
        return [
            MethodBinding(b.method, b.params_type, b.handler, b.protocol_versions)
            for b in self.core.methods()
        ]

    def lifespan(self) -> contextlib.AbstractAsyncContextManager[None]:
        return self._lifespan()

    @contextlib.asynccontextmanager
    async def _lifespan(self) -> AsyncIterator[None]:
        await self._read_support()
        try:
            yield
        finally:
            await self.core.registry.shutdown()  # drains the running tasks

    async def intercept_tool_call(
        self,
        params: CallToolRequestParams,
        context: Context,
        call_next: ToolCallContinuation,
    ) -> ToolCallOutcome:
        tool = await context.fastmcp.get_tool(params.name)
        config = getattr(tool, "task_config", None)
        mode: TaskSupport = getattr(config, "mode", "forbidden")
        interval = getattr(config, "poll_interval", None)
        poll_ms = int(interval.total_seconds() * 1000) if interval is not None else None
        request = context.request_context
        srctx: ServerRequestContext[Any, Any] | None = getattr(request, "_srctx", None)
        if srctx is None or mode == "forbidden":
            return await call_next()
        self.core.task_support[params.name] = mode
        # (A tool that says it may answer with an InputRequiredResult gets an input
        # window, for one that does some I/O before it asks.)
        window = max(self.core.input_window, ASK_FIRST_WINDOW) if _may_ask_first(tool) else None
        body = _tool_body(call_next)
        result = await self.core.run_tool_call(params, srctx, body, mode, poll_ms, window)
        if isinstance(result, dict):
            return CreateTaskResult(**result)
        if result is None:  # (no answer a tool call could give)
            raise MCPError(-32603, "The tool call gave no result.")
        return result


def _may_ask_first(tool: object) -> bool:
    """Whether *tool*'s function declares that it may return an ``InputRequiredResult``
    (an input round before its task); a tool that cannot be read is assumed to."""
    fn = getattr(tool, "fn", None)
    if fn is None:
        return True
    try:
        annotation = inspect.signature(fn).return_annotation
    except (TypeError, ValueError):
        return True
    if annotation is inspect.Signature.empty:
        return False
    return "InputRequiredResult" in (
        annotation if isinstance(annotation, str) else repr(annotation)
    )


def _tool_body(
    call_next: ToolCallContinuation,
) -> Callable[[ServerRequestContext[Any, Any]], Any]:
    """The SDK-shaped ``call_next`` of the task core: run FastMCP's continuation under
    *ctx* (the task's session, and a progress token so progress reaches it), its answer
    as the wire's ``CallToolResult`` (a tool error is a result with ``isError``, as
    FastMCP answers it to a plain call)."""

    async def run(ctx: ServerRequestContext[Any, Any]) -> Any:
        meta = dict(ctx.meta or {})
        meta.setdefault("progress_token", PROGRESS_TOKEN)
        # FastMCP refuses ctx.elicit and ctx.sample at 2026-07-28 (no back-channel) before
        # they reach the session; a task's session has one (its inputRequests), so the
        # tool sees the handshake era's: every server-to-client request reaches it.
        task_ctx = dataclasses.replace(ctx, meta=meta, protocol_version=HANDSHAKE_ERA)  # type: ignore[arg-type]
        with bind_request_context(task_ctx):
            try:
                outcome = await call_next()
            except MCPError:
                raise
            except ToolError as exc:
                error: list[ContentBlock] = [TextContent(type="text", text=str(exc))]
                return CallToolResult(content=error, is_error=True)
        if isinstance(outcome, InputRequiredToolResult):
            return outcome  # an input round: answered as FastMCP answers one
        if isinstance(outcome, ToolResult):
            return CallToolResult(
                content=outcome.content,
                structured_content=outcome.structured_content,
                _meta=outcome.meta,
            )
        return outcome

    return run
