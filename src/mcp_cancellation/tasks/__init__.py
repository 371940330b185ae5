"""Tasks (SEP-2663, ``io.modelcontextprotocol/tasks``) for the SDK's ``MCPServer``
(``[mcp]``) and for FastMCP (``[fastmcp]``): long tools answered with a task handle,
polled with ``tasks/get``, answered with ``tasks/update`` and cancelled with
``tasks/cancel`` from any worker, each task bound to its caller's scope and kept in the
registry's storage.

    registry = CancellationRegistry(storage)
    tasks = TasksExtension(registry, tools={"slow_count": "optional"})
    server = MCPServer("app", extensions=[tasks], middleware=[tasks])
    app = CancellationMiddleware(server.streamable_http_app(), registry=registry)

A FastMCP server registers :class:`FastMCPTasksExtension` instead:
``mcp.add_extension(FastMCPTasksExtension(registry))``.

See docs/guide.md, "Long tools as tasks".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._extension import IDENTIFIER, TasksExtension, TaskSupport

if TYPE_CHECKING:
    from ._fastmcp import FastMCPTasksExtension

__all__ = ["IDENTIFIER", "FastMCPTasksExtension", "TaskSupport", "TasksExtension"]


def __getattr__(name: str) -> Any:
    # FastMCP's adapter loads on first use: the SDK's extension needs no FastMCP.
    if name == "FastMCPTasksExtension":
        from ._fastmcp import FastMCPTasksExtension

        return FastMCPTasksExtension
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
