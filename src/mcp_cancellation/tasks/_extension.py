"""``TasksExtension``: SEP-2663 tasks for the SDK's ``MCPServer``, on the registry's table.

A ``tools/call`` of an opted-in tool, from a request whose per-request capabilities
declare ``io.modelcontextprotocol/tasks``, is answered at once with a task handle, once
the task is recorded in the storage's task table; the tool then runs on this worker
under a registry request keyed by (scope, task id), so that ``tasks/cancel`` on any
worker cancels it as any cross-worker cancellation does. ``tasks/get``, ``tasks/update``
and ``tasks/cancel`` read and write the table, keyed by the caller's scope: another
scope's task is an unknown one. The states and transitions are docs/architecture.md,
"Tasks".
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import secrets
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from .._config import int_limit, seconds
from .._context import current_token
from .._errors import CancellationLimitReached, ConfigurationError, StorageUnavailable
from .._extras import requires
from ..signals import task_created, task_ended, task_rejected
from ..storage._task_table import ACTIVE, TaskRecord, TaskTable
from ._run import TaskRun, now_ms

with requires("mcp", "mcp_cancellation.tasks"):
    from mcp.server.extension import Extension, MethodBinding
    from mcp.shared.exceptions import MCPError
    from mcp_types import CallToolRequestParams, RequestParams
    from pydantic import ConfigDict

if TYPE_CHECKING:
    from mcp.server.context import CallNext, HandlerResult, ServerRequestContext

    from .._registry import CancellationRegistry

__all__ = ["IDENTIFIER", "TasksExtension"]

logger = logging.getLogger("mcp_cancellation.tasks")

#: The extension's identifier, as clients declare it.
IDENTIFIER = "io.modelcontextprotocol/tasks"
#: Where a request's per-request capabilities are (2026-07-28 on).
_CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
#: JSON-RPC codes: invalid params, internal error, missing client capability.
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
MISSING_CAPABILITY = -32021
HEADER_MISMATCH = -32020
#: The longest task id a request may name (ours are 32 characters).
MAX_TASK_ID_CHARS = 128
#: The most answers one ``tasks/update`` may carry.
MAX_ANSWERS = 64

_UNKNOWN = "Unknown task"
_UNAVAILABLE = "Task storage unavailable; try again shortly."
_DEAD_WORKER = json.dumps(
    {"code": INTERNAL_ERROR, "message": "The worker running this task stopped."}
)


class TaskParams(RequestParams):
    """``tasks/get`` and ``tasks/cancel`` params; checked by the handler, so that a bad
    ``taskId`` gets the extension's own error."""

    model_config = ConfigDict(extra="allow")
    taskId: Any = None


class UpdateParams(TaskParams):
    """``tasks/update`` params."""

    inputResponses: Any = None


class TasksExtension(Extension):
    """Run *tools* as tasks (SEP-2663) for clients that declare the extension.

    Pass the registry the :class:`~mcp_cancellation.CancellationMiddleware` in front of
    the app uses: a task's scope is its caller's, as the middleware computed it, and its
    tool is cancelled through that registry. *ttl* is how long a task and its result are
    kept after creation (seconds); *poll_interval* the ``pollIntervalMs`` clients are told;
    *max_result_bytes* the largest encoded result a task keeps (a larger one fails the
    task); *max_tasks_per_scope* how many tasks one scope may hold (past it, the call runs
    as a plain call); *kill_after* how long a tool that ignores its task's cancellation
    may run on (as the middleware's ``stream_cancel_timeout``).
    """

    identifier = IDENTIFIER

    def __init__(
        self,
        registry: CancellationRegistry,
        *,
        tools: Iterable[str],
        ttl: float = 3600.0,
        poll_interval: float = 1.0,
        max_result_bytes: int = 1024 * 1024,
        max_tasks_per_scope: int | None = 100,
        kill_after: float | None = 10.0,
    ) -> None:
        if isinstance(tools, str):
            raise ConfigurationError("tools must be a collection of tool names, not a string")
        self.registry = registry
        self.task_tools = frozenset(tools)
        ttl_s = seconds("ttl", ttl, None, None)
        poll_s = seconds("poll_interval", poll_interval, None, None)
        if ttl_s is None or poll_s is None:
            raise ConfigurationError("ttl and poll_interval must be numbers of seconds")
        self.ttl_ms = max(1, int(ttl_s * 1000))
        self.poll_ms = max(1, int(poll_s * 1000))
        limit = int_limit("max_result_bytes", max_result_bytes, "", None)
        if limit is None:
            raise ConfigurationError("max_result_bytes must be a positive integer")
        self.max_result_bytes = limit
        self.max_tasks_per_scope = int_limit("max_tasks_per_scope", max_tasks_per_scope, "", None)
        self.kill_after = seconds("kill_after", kill_after, None, None, zero=True)
        self._running: set[asyncio.Task[None]] = set()

    @property
    def table(self) -> TaskTable:
        """The task table of the registry's storage."""
        return self.registry.storage.task_table

    @property
    def running(self) -> int:
        """How many tasks' tools run in this process now."""
        return len(self._running)

    def methods(self) -> list[MethodBinding]:
        return [
            MethodBinding("tasks/get", TaskParams, self._get),
            MethodBinding("tasks/update", UpdateParams, self._update),
            MethodBinding("tasks/cancel", TaskParams, self._cancel),
        ]

    # -- creation ----------------------------------------------------------------------

    async def intercept_tool_call(
        self,
        params: CallToolRequestParams,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
    ) -> HandlerResult:
        """Answer an opted-in tool's call with a task handle, or run it as a plain call."""
        if params.name not in self.task_tools or not _declares(ctx):
            return await call_next(ctx)
        token = current_token()
        if token is None:  # no middleware in front: no scope to bind the task to
            logger.warning("tasks need CancellationMiddleware in front of the app")
            return await call_next(ctx)
        scope = token.scope
        now = now_ms()
        record = TaskRecord(
            # 192 random bits, in hex: no id starts with "-", which a command line would
            # read as an option (mcp-cancellation cancel --id ...).
            task_id=secrets.token_hex(24),
            scope=scope,
            tool=params.name,
            status="working",
            worker=self.registry.instance_id,
            created_ms=now,
            updated_ms=now,
            ttl_ms=self.ttl_ms,
            poll_ms=self.poll_ms,
        )
        try:
            created = await self.table.create(record, self.max_tasks_per_scope)
        except StorageUnavailable as exc:
            logger.warning("task not created, ran as a plain call: %s", exc)
            self._reject(scope, token.tool, "unavailable")
            return await call_next(ctx)
        if not created:
            self._reject(scope, token.tool, "quota")
            return await call_next(ctx)
        run = TaskRun(self, record, token.tool, ctx, call_next)
        work = asyncio.get_running_loop().create_task(run.run(), name=f"task {record.task_id}")
        self._running.add(work)
        work.add_done_callback(self._running.discard)
        if task_created.receivers:
            task_created.send(self.registry, task_id=record.task_id, scope=scope, tool=token.tool)
        return {"resultType": "task", **task_fields(record)}

    def _reject(self, scope: str, tool: str | None, reason: str) -> None:
        if task_rejected.receivers:
            task_rejected.send(self.registry, scope=scope, tool=tool, reason=reason)

    # -- tasks/get, tasks/update, tasks/cancel ----------------------------------------

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> HandlerResult:
        record = await self._find(ctx, params)
        return {"resultType": "complete", **task_fields(record, detail=True)}

    async def _cancel(
        self, ctx: ServerRequestContext[Any, Any], params: TaskParams
    ) -> HandlerResult:
        record = await self._find(ctx, params)
        if record.status in ACTIVE:
            # cancel(), not cancel_in_flight(): a task id is never reused, so a
            # cancellation recorded before its run's track reached the table (its worker's
            # loop busy) waits for that track instead of lapsing after track_wait.
            try:
                await self.registry.cancel(
                    record.task_id, "tasks/cancel", record.scope, method="tasks/cancel"
                )
            except StorageUnavailable as exc:
                raise MCPError(INTERNAL_ERROR, _UNAVAILABLE) from exc
            except CancellationLimitReached as exc:
                raise MCPError(-32000, "Too many outstanding cancellations.") from exc
        return {"resultType": "complete"}

    async def _update(
        self, ctx: ServerRequestContext[Any, Any], params: UpdateParams
    ) -> HandlerResult:
        responses = params.inputResponses
        if not isinstance(responses, dict) or len(responses) > MAX_ANSWERS:
            raise MCPError(
                INVALID_PARAMS,
                f"Invalid params: inputResponses must be an object of at most {MAX_ANSWERS}",
            )
        record = await self._find(ctx, params)
        answers: dict[str, str] = {}
        size = 0
        for key, value in responses.items():
            if not isinstance(value, dict) or not isinstance(key, str) or len(key) > 64:
                continue  # not an answer to any key of ours: ignored
            encoded = json.dumps(value, separators=(",", ":"))
            size += len(encoded)
            if size > self.max_result_bytes:
                raise MCPError(INVALID_PARAMS, "Invalid params: inputResponses too large")
            answers[key] = encoded
        if answers and record.inputs:
            try:
                await self.table.answer(record.scope, record.task_id, answers)
            except StorageUnavailable as exc:
                raise MCPError(INTERNAL_ERROR, _UNAVAILABLE) from exc
        return {"resultType": "complete"}

    async def _find(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> TaskRecord:
        """The caller's task that *params* names; the SEP's errors otherwise."""
        if not _declares(ctx):
            raise MCPError(
                MISSING_CAPABILITY,
                f"The request does not declare the {IDENTIFIER} extension",
                {"requiredCapabilities": {"extensions": {IDENTIFIER: {}}}},
            )
        task_id = params.taskId
        if not isinstance(task_id, str) or not task_id or len(task_id) > MAX_TASK_ID_CHARS:
            raise MCPError(
                INVALID_PARAMS,
                f"Invalid params: taskId must be a string of 1 to {MAX_TASK_ID_CHARS} characters",
            )
        named = _header(ctx, "mcp-name")
        if named is not None and named != task_id:
            raise MCPError(HEADER_MISMATCH, "The Mcp-Name header does not match taskId")
        token = current_token()
        if token is None:
            raise MCPError(INTERNAL_ERROR, "tasks need CancellationMiddleware in front of the app")
        try:
            record = await self.table.get(token.scope, task_id, _DEAD_WORKER)
        except StorageUnavailable as exc:
            raise MCPError(INTERNAL_ERROR, _UNAVAILABLE) from exc
        if record is None:
            raise MCPError(INVALID_PARAMS, _UNKNOWN)
        if record.orphaned and task_ended.receivers:
            # This read ended the task of a dead worker: nobody else reports its end.
            tool = record.tool if record.tool in self.task_tools else None
            seconds = max(0.0, (now_ms() - record.created_ms) / 1000)
            task_ended.send(
                self.registry,
                task_id=record.task_id,
                scope=record.scope,
                tool=tool,
                status="failed",
                seconds=seconds,
                orphaned=True,
            )
        return record


def _declares(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the request's per-request capabilities declare the extension (only
    protocol versions with per-request capabilities have them)."""
    meta: object = ctx.meta
    capabilities = meta.get(_CAPABILITIES_KEY) if isinstance(meta, Mapping) else None
    if not isinstance(capabilities, Mapping):
        return False
    extensions = capabilities.get("extensions")
    return isinstance(extensions, Mapping) and IDENTIFIER in extensions


def _header(ctx: ServerRequestContext[Any, Any], name: str) -> str | None:
    headers = getattr(ctx.request, "headers", None)
    value = headers.get(name) if headers is not None else None
    return value if isinstance(value, str) else None


def _iso(ms: int) -> str:
    moment = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def task_fields(record: TaskRecord, *, detail: bool = False) -> dict[str, Any]:
    """A task as SEP-2663 puts it on the wire; with *detail* (``tasks/get``), its
    outcome: ``result``, ``error`` or ``inputRequests``."""
    fields: dict[str, Any] = {
        "taskId": record.task_id,
        "status": record.status,
        "createdAt": _iso(record.created_ms),
        "lastUpdatedAt": _iso(record.updated_ms),
        "ttlMs": record.ttl_ms,
        "pollIntervalMs": record.poll_ms,
    }
    if record.message is not None:
        fields["statusMessage"] = record.message
    if not detail:
        return fields
    if record.status == "completed" and record.result is not None:
        fields["result"] = json.loads(record.result)
    elif record.status == "failed" and record.error is not None:
        fields["error"] = json.loads(record.error)
    elif record.status == "input_required":
        waiting = {k: json.loads(v) for k, v in record.inputs.items() if k not in record.answers}
        fields["inputRequests"] = waiting
    return fields
