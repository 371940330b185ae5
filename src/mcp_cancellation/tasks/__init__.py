"""Tasks (SEP-2663, ``io.modelcontextprotocol/tasks``) for the SDK's ``MCPServer``
(``[mcp]``): long tools answered with a task handle, polled with ``tasks/get``, answered
with ``tasks/update`` and cancelled with ``tasks/cancel`` from any worker, each task bound
to its caller's scope and kept in the registry's storage.

    registry = CancellationRegistry(storage)
    tasks = TasksExtension(registry, tools={"slow_count": "optional"})
    server = MCPServer("app", extensions=[tasks], middleware=[tasks])
    app = CancellationMiddleware(server.streamable_http_app(), registry=registry)

See docs/guide.md, "Long tools as tasks".
"""

from __future__ import annotations

from ._extension import IDENTIFIER, TasksExtension, TaskSupport

__all__ = ["IDENTIFIER", "TaskSupport", "TasksExtension"]
