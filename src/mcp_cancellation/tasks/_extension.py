"""``TasksExtension``: SEP-2663 tasks for the SDK's ``MCPServer``, on the registry's table.

A ``tools/call`` of a tool with task support, at protocol 2026-07-28 or later, from a
request whose per-request capabilities declare ``io.modelcontextprotocol/tasks``, is
answered with a task handle once the task is recorded in the storage's task table (a tool
that answers with an ``InputRequiredResult`` within its ``input_window`` is answered
directly: input rounds come before the task); the tool runs on this worker
under a registry request keyed by (scope, task id), so that ``tasks/cancel`` on any
worker cancels it as any cross-worker cancellation does. ``tasks/get``, ``tasks/update``
and ``tasks/cancel`` read and write the table, keyed by the caller's scope: another
scope's task is an unknown one. The states and transitions are docs/architecture.md,
"Tasks".
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
import logging
import secrets
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal, get_args

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
    from mcp.shared.inbound import MCP_NAME_HEADER, decode_header_value
    from mcp_types import (
        CallToolRequestParams,
        InputRequiredResult,
        ListToolsResult,
        RequestParams,
        ToolExecution,
    )
    from mcp_types.jsonrpc import (
        HEADER_MISMATCH,
        INTERNAL_ERROR,
        INVALID_PARAMS,
        MISSING_REQUIRED_CLIENT_CAPABILITY,
    )
    from mcp_types.version import KNOWN_PROTOCOL_VERSIONS, is_version_at_least
    from pydantic import ConfigDict, Field

if TYPE_CHECKING:
    from mcp.server.context import CallNext, HandlerResult, ServerRequestContext

    from .._registry import CancellationRegistry

__all__ = ["IDENTIFIER", "TaskSupport", "TasksExtension"]

logger = logging.getLogger("mcp_cancellation.tasks")

#: The extension's identifier, as clients declare it.
IDENTIFIER = "io.modelcontextprotocol/tasks"
#: The first protocol version with the extension (before it, no request is a task request).
FIRST_VERSION = "2026-07-28"
#: The protocol versions that have the extension (its methods answer -32601 at others).
VERSIONS = frozenset(v for v in KNOWN_PROTOCOL_VERSIONS if is_version_at_least(v, FIRST_VERSION))
#: Where a request's per-request capabilities are (2026-07-28 on).
_CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
#: A tool's task support, as SEP-2663 names it (``execution.taskSupport`` in tools/list).
TaskSupport = Literal["required", "optional", "forbidden"]
#: The ``_meta`` key of a plain call that could have been a task: why it was not.
REJECTED_META = "io.github.mcp-cancellation/taskRejected"
#: The longest task id a request may name (ours are 48 characters).
MAX_TASK_ID_CHARS = 128
#: The most answers one ``tasks/update`` may carry.
MAX_ANSWERS = 64
#: Loop steps a task's tool gets before its handle, to answer an input round at once.
FIRST_STEPS = 10
#: How often a worker ends the running tasks of dead workers (seconds): their records
#: never expire while they read ``working``, so somebody must (a ``tasks/get`` does too).
REAP_INTERVAL = 5.0

_UNKNOWN = "Unknown task"
_UNAVAILABLE = "Task storage unavailable; try again shortly."
_ORPHANED = json.dumps({"code": INTERNAL_ERROR, "message": "The worker running this task stopped."})
#: The reason of a client's cancellation, which its task's statusMessage shows.
_CLIENT_CANCEL = "Cancelled by the client (tasks/cancel)."


class TaskParams(RequestParams):
    """``tasks/get`` and ``tasks/cancel`` params. Checked by the handler (a bad
    ``taskId`` is -32602), not by the model: before 2026-07-28 the methods do not exist,
    and every call of them is -32601, whatever its params."""

    model_config = ConfigDict(extra="allow")
    task_id: Any = Field(default=None, alias="taskId")

    def checked_id(self) -> str:
        """The ``taskId``, or -32602."""
        task_id = self.task_id
        if not isinstance(task_id, str) or not 0 < len(task_id) <= MAX_TASK_ID_CHARS:
            raise MCPError(INVALID_PARAMS, "Invalid params: taskId")
        return task_id


class UpdateParams(TaskParams):
    """``tasks/update`` params (checked by the handler, as :class:`TaskParams`)."""

    input_responses: Any = Field(default=None, alias="inputResponses")

    def checked_responses(self) -> dict[str, Any]:
        """The ``inputResponses``, or -32602."""
        responses = self.input_responses
        if not isinstance(responses, dict) or len(responses) > MAX_ANSWERS:
            raise MCPError(INVALID_PARAMS, "Invalid params: inputResponses")
        return responses


class TasksExtension(Extension):
    """Run *tools* as tasks (SEP-2663) for clients that declare the extension.

    *tools* names the tools with task support: a collection of names (each
    ``optional``), or a mapping of name to ``"required"``, ``"optional"`` or
    ``"forbidden"``. A ``required`` tool called without the extension gets ``-32021``;
    an ``optional`` one then runs as a plain call. Pass the extension as the server's
    middleware too (``MCPServer(..., extensions=[tasks], middleware=[tasks])``) so that
    ``tools/list`` states each tool's task support and ``subscriptions/listen`` is
    gated on the extension.

    Pass the registry the :class:`~mcp_cancellation.CancellationMiddleware` in front of
    the app uses: a task's scope is its caller's, as the middleware computed it, and its
    tool is cancelled through that registry. *ttl* is how long a task and its result are
    kept after it ends (seconds; a running task never expires); *poll_interval* the
    ``pollIntervalMs`` clients are told; *max_result_bytes* the largest encoded result a
    task keeps (a larger one fails the task); *max_tasks_per_scope* how many tasks one
    scope may hold, running or ended and kept, and *max_tasks* how many the whole table
    may hold (past either, the call runs as a plain call: so the table's result bytes stay
    under ``max_tasks * max_result_bytes``); *kill_after* how long a tool that ignores its
    task's cancellation may run on (as the middleware's ``stream_cancel_timeout``);
    *drain_timeout* how long, when the server stops, running tasks may go on before they
    are cancelled (docs/deployment.md, "Tasks and rolling deploys").
    """

    identifier = IDENTIFIER

    def __init__(
        self,
        registry: CancellationRegistry,
        *,
        tools: Iterable[str] | Mapping[str, TaskSupport],
        ttl: float = 3600.0,
        poll_interval: float = 1.0,
        max_result_bytes: int = 1024 * 1024,
        max_tasks_per_scope: int | None = 100,
        max_tasks: int | None = 10_000,
        kill_after: float | None = 10.0,
        drain_timeout: float = 10.0,
        input_window: float = 0.0,
        require_mcp_name: bool = False,
    ) -> None:
        if isinstance(tools, str):
            raise ConfigurationError("tools must be a collection of tool names, not a string")
        support: dict[str, TaskSupport] = (
            dict(tools) if isinstance(tools, Mapping) else dict.fromkeys(tools, "optional")
        )
        for name, mode in support.items():
            if mode not in get_args(TaskSupport):
                raise ConfigurationError(
                    f"task support of {name!r} must be required, optional or forbidden"
                )
        self.registry = registry
        #: Each named tool's task support (a tool not named is ``forbidden``).
        self.task_support = support
        window = seconds("input_window", input_window, None, None, zero=True)
        if window is None:
            raise ConfigurationError("input_window must be a number of seconds")
        self.input_window = window
        self.require_mcp_name = require_mcp_name
        self._middleware_seen = False
        self._warned = False
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
        self.max_tasks = int_limit("max_tasks", max_tasks, "", None)
        self.kill_after = seconds("kill_after", kill_after, None, None, zero=True)
        drain = seconds("drain_timeout", drain_timeout, None, None, zero=True)
        if drain is None:
            raise ConfigurationError("drain_timeout must be a number of seconds")
        self.drain_timeout = drain
        self._running: dict[asyncio.Task[None], TaskRun] = {}
        self._background: set[asyncio.Task[None]] = set()
        self._reaper: asyncio.Task[None] | None = None
        self._listening = False
        self._closing = False
        registry.on_shutdown(self.shutdown)

    @property
    def task_tools(self) -> frozenset[str]:
        """The tools that may run as tasks (``optional`` or ``required``)."""
        return frozenset(n for n, mode in self.task_support.items() if mode != "forbidden")

    @property
    def table(self) -> TaskTable:
        """The task table of the registry's storage."""
        return self.registry.storage.task_table

    @property
    def running(self) -> int:
        """How many tasks' tools run in this process now."""
        return len(self._running)

    # -- this worker's runs: claims after a resync, the reaper, shutdown ---------------------

    def _start(self) -> None:
        """At the first call: hear this worker's resyncs (its running tasks are then
        claimed again) and reap dead workers' tasks (a shared table only)."""
        if self._listening:
            return
        self._listening = True
        table = self.table
        table.on_resync(self._resynced)
        if table.shared:
            self._reaper = asyncio.get_running_loop().create_task(
                self._reap(), name="mcp-cancellation-task-reaper"
            )

    def _spawn(self, work: Any, name: str) -> None:
        task = asyncio.get_running_loop().create_task(work, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _resynced(self) -> None:
        if self._running:
            self._spawn(self._claim_all(), "mcp-cancellation-task-claims")

    async def _claim_all(self) -> None:
        """Claim every running task again after a resync: rewrite those the table lost,
        and stop those that ended meanwhile (this worker was taken for dead)."""
        for run in list(self._running.values()):
            if run.ended or run.fenced:
                continue
            try:
                claim = await self.table.claim(run.record)
            except StorageUnavailable:
                continue  # the next resync claims it
            if claim == "ended":
                run.fence()
            elif claim == "restored":
                logger.info("task %s written again after the table was lost", run.record.task_id)

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(REAP_INTERVAL)
            try:
                ended = await self.table.reap(_ORPHANED)
            except StorageUnavailable:
                continue
            except Exception:  # never die: a later round may succeed
                logger.exception("ending dead workers' tasks failed")
                continue
            for record in ended:
                self._orphaned(record)

    def _orphaned(self, record: TaskRecord) -> None:
        """Report the end of a dead worker's task that this worker wrote."""
        logger.warning(
            "task %s in scope %s failed: the worker running it stopped",
            record.task_id,
            record.scope,
        )
        if task_ended.receivers:
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

    async def shutdown(self) -> None:
        """Stop taking tasks, give the running ones ``drain_timeout`` to end, cancel what
        is left (each ends ``failed``: the server stopped), then kill what outlives
        ``kill_after``. Run by the middleware on the app's lifespan shutdown."""
        self._closing = True
        if self._reaper is not None:
            self._reaper.cancel()
        running = set(self._running)
        if running and self.drain_timeout:
            logger.info("waiting up to %gs for %d task(s)", self.drain_timeout, len(running))
            _, running = await asyncio.wait(running, timeout=self.drain_timeout)
        if not running:
            return
        logger.warning("stopping %d task(s): the server is shutting down", len(running))
        for work in running:
            run = self._running.get(work)
            if run is not None:
                run.stop()
        # Each run kills its tool after kill_after and writes its end; allow for that.
        grace = (self.kill_after or 0.0) + 2.0
        _, running = await asyncio.wait(running, timeout=grace)
        for work in running:  # (kill_after None: a tool that never stops)
            run = self._running.get(work)
            work.cancel()
            if run is not None and not run.ended:
                await run.end_stopped()

    def methods(self) -> list[MethodBinding]:
        return [
            MethodBinding("tasks/get", TaskParams, self._get, VERSIONS),
            MethodBinding("tasks/update", UpdateParams, self._update, VERSIONS),
            MethodBinding("tasks/cancel", TaskParams, self._cancel, VERSIONS),
        ]

    # -- the server middleware: tools/list and subscriptions/listen ---------------------

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        """As the server's middleware: ``tools/list`` states each tool's task support,
        and a ``subscriptions/listen`` asking for task notifications without the
        extension gets ``-32021`` (with it, the ``taskIds`` filter is dropped: this
        server sends no task notifications, and its acknowledgement says so)."""
        self._middleware_seen = True
        method = ctx.method
        if method == "subscriptions/listen":
            ctx = self._listen(ctx)
        result = await call_next(ctx)
        if method == "tools/list":
            self._state_support(result)
        return result

    def _state_support(self, result: object) -> None:
        """Put each named tool's task support in a ``tools/list`` result, as SEP-2663
        names it: ``execution.taskSupport`` (the wire dict, or the SDK's model)."""
        if isinstance(result, ListToolsResult):
            for tool in result.tools:
                mode = self.task_support.get(tool.name)
                if mode is not None:
                    tool.execution = ToolExecution(task_support=mode)
            return
        tools = result.get("tools") if isinstance(result, dict) else None
        for tool in tools if isinstance(tools, list) else ():
            name = tool.get("name") if isinstance(tool, dict) else None
            mode = self.task_support.get(name) if isinstance(name, str) else None
            if mode is not None:
                execution = tool.get("execution")
                tool["execution"] = {
                    **(execution if isinstance(execution, dict) else {}),
                    "taskSupport": mode,
                }

    def _listen(self, ctx: ServerRequestContext[Any, Any]) -> ServerRequestContext[Any, Any]:
        params = ctx.params
        if not isinstance(params, Mapping):
            return ctx
        notifications = params.get("notifications")
        if not isinstance(notifications, Mapping) or "taskIds" not in notifications:
            return ctx
        if not _declared_in(params.get("_meta")):
            raise _missing_extension()
        kept = {k: v for k, v in notifications.items() if k != "taskIds"}
        return dataclasses.replace(ctx, params={**params, "notifications": kept})

    # -- creation ----------------------------------------------------------------------

    async def intercept_tool_call(
        self,
        params: CallToolRequestParams,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
    ) -> HandlerResult:
        """Answer a task-supporting tool's call with a task handle, or run it as a plain
        call; a ``required`` one called without the extension gets ``-32021``."""
        if not self._middleware_seen and not self._warned:
            self._warned = True
            logger.warning(
                "pass the TasksExtension as the server's middleware too "
                "(MCPServer(..., middleware=[tasks])): tools/list does not state task support"
            )
        mode = self.task_support.get(params.name, "forbidden")
        return await self.run_tool_call(params, ctx, call_next, mode)

    async def run_tool_call(
        self,
        params: CallToolRequestParams,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
        mode: str,
        poll_ms: int | None = None,
        input_window: float | None = None,
    ) -> HandlerResult:
        """The tool call of a tool whose task support is *mode* (the task core of every
        adapter: the SDK's interceptor above, FastMCP's extension). *call_next* runs the
        tool with the context it is given; *poll_ms* overrides ``poll_interval``, and
        *input_window* the ``input_window`` (0 for a tool that never asks first)."""
        if mode not in ("required", "optional"):
            return await call_next(ctx)
        if not (_modern(ctx) and _declares(ctx)):
            if mode == "required":
                raise _missing_extension()
            return await call_next(ctx)
        self._start()
        token = current_token()
        if token is None:  # no middleware in front: no scope to bind the task to
            logger.warning("tasks need CancellationMiddleware in front of the app")
            if mode == "required":
                raise MCPError(INTERNAL_ERROR, "Tasks are not available on this server.")
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
            poll_ms=self.poll_ms if poll_ms is None else max(1, poll_ms),
        )
        if self._closing:
            self._refuse(mode, scope, token.tool, "shutdown")
            shut: HandlerResult = _with_rejection(await call_next(ctx), "shutdown")
            return shut
        run = TaskRun(self, record, token.tool, ctx, call_next)
        work = asyncio.get_running_loop().create_task(run.run(), name=f"task {record.task_id}")
        self._running[work] = run
        work.add_done_callback(self._forget)
        try:
            window = self.input_window if input_window is None else input_window
            if await self._input_first(run, window):
                run.decide(recorded=False)  # an input round: answered directly
                answer: HandlerResult = run.answer()
                return answer
            created: str
            try:
                created = await self.table.create(record, self.max_tasks_per_scope, self.max_tasks)
            except StorageUnavailable as exc:
                logger.warning("task not created: %s", exc)
                created = "unavailable"
        except BaseException:  # the call was cancelled (its client went away)
            run.decide(recorded=False)
            work.cancel()
            raise
        if created != "created":
            # The tool already runs: it goes on as the plain call it is (a required one
            # is stopped: it may only run as a task).
            run.decide(recorded=False)
            if mode == "required":
                work.cancel()
            self._refuse(mode, scope, token.tool, created)
            await run.finished.wait()
            plain: HandlerResult = _with_rejection(run.answer(), created)
            return plain
        run.decide(recorded=True)
        if task_created.receivers:
            task_created.send(self.registry, task_id=record.task_id, scope=scope, tool=token.tool)
        return {"resultType": "task", **task_fields(record)}

    async def _input_first(self, run: TaskRun, window: float) -> bool:
        """Let the tool take its first steps (a tool that asks first answers at once,
        without waiting on anything), then its input *window* (for one that does some
        I/O first): whether it answered with an ``InputRequiredResult`` (an input round,
        answered without a task). It is a task as soon as it asks for input otherwise,
        or runs on past both."""
        started = asyncio.ensure_future(run.started.wait())
        finished = asyncio.ensure_future(run.finished.wait())
        asked = asyncio.ensure_future(run.asked.wait())
        try:
            await asyncio.wait({started, finished}, return_when=asyncio.FIRST_COMPLETED)
            for _ in range(FIRST_STEPS):
                if run.finished.is_set() or run.asked.is_set():
                    break
                await asyncio.sleep(0)  # (one step of the loop: the tool's, too)
            if not (run.finished.is_set() or run.asked.is_set()) and window:
                await asyncio.wait({finished, asked}, timeout=window)
        finally:
            for waiter in (started, finished, asked):
                waiter.cancel()
        return (
            run.finished.is_set()
            and run.error is None
            and (
                isinstance(run.value, InputRequiredResult)
                # (FastMCP wraps it: InputRequiredToolResult.input_required)
                or isinstance(getattr(run.value, "input_required", None), InputRequiredResult)
            )
        )

    def _refuse(self, mode: str, scope: str, tool: str | None, reason: str) -> None:
        """A call that could not become a task: ``task.rejected``; a required tool's
        call gets an error that says why (an optional one runs as the plain call it is)."""
        self._reject(scope, tool, reason)
        if mode == "required":
            raise MCPError(INTERNAL_ERROR, _REFUSALS.get(reason, _REFUSALS["unavailable"]))

    def _forget(self, work: asyncio.Task[None]) -> None:
        self._running.pop(work, None)

    def _reject(self, scope: str, tool: str | None, reason: str) -> None:
        if task_rejected.receivers:
            task_rejected.send(self.registry, scope=scope, tool=tool, reason=reason)

    # -- tasks/get, tasks/update, tasks/cancel ----------------------------------------

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> HandlerResult:
        self._start()
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
                    record.task_id, _CLIENT_CANCEL, record.scope, method="tasks/cancel"
                )
                # The run writes its end before its request leaves the table: a task
                # that ended meanwhile left a pending row nobody will claim (task ids
                # never repeat). Remove it: it would hold the scope's quota.
                after = await self.table.get(record.scope, record.task_id, _ORPHANED)
                if after is None or after.status not in ACTIVE:
                    await self.registry.clear(record.task_id, record.scope)
            except StorageUnavailable as exc:
                raise MCPError(INTERNAL_ERROR, _UNAVAILABLE) from exc
            except CancellationLimitReached as exc:
                raise MCPError(-32000, "Too many outstanding cancellations.") from exc
        return {"resultType": "complete"}

    async def _update(
        self, ctx: ServerRequestContext[Any, Any], params: UpdateParams
    ) -> HandlerResult:
        responses = params.checked_responses()
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
            raise _missing_extension()
        task_id = params.checked_id()
        sent = _header(ctx, MCP_NAME_HEADER)
        if sent is None and self.require_mcp_name:
            raise MCPError(HEADER_MISMATCH, "The Mcp-Name header (the taskId) is required")
        if sent is not None and decode_header_value(sent.strip()) != task_id:
            raise MCPError(HEADER_MISMATCH, "The Mcp-Name header does not match taskId")
        token = current_token()
        if token is None:
            raise MCPError(INTERNAL_ERROR, "tasks need CancellationMiddleware in front of the app")
        try:
            record = await self.table.get(token.scope, task_id, _ORPHANED)
        except StorageUnavailable as exc:
            raise MCPError(INTERNAL_ERROR, _UNAVAILABLE) from exc
        if record is None:
            raise MCPError(INVALID_PARAMS, _UNKNOWN)
        if record.orphaned:
            # This read ended the task of a dead worker: nobody else reports its end.
            self._orphaned(record)
        return record


def _declares(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the request's per-request capabilities declare the extension (only
    protocol versions with per-request capabilities have them)."""
    return _declared_in(ctx.meta)


def _declared_in(meta: object) -> bool:
    capabilities = meta.get(_CAPABILITIES_KEY) if isinstance(meta, Mapping) else None
    if not isinstance(capabilities, Mapping):
        return False
    extensions = capabilities.get("extensions")
    return isinstance(extensions, Mapping) and IDENTIFIER in extensions


def _modern(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the request speaks a protocol version with the extension: before
    2026-07-28 an opt-in in ``_meta`` does not make a call a task request."""
    version = getattr(ctx, "protocol_version", None)
    return isinstance(version, str) and is_version_at_least(version, FIRST_VERSION)


def _missing_extension() -> MCPError:
    return MCPError(
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        f"The request does not declare the {IDENTIFIER} extension",
        {"requiredCapabilities": {"extensions": {IDENTIFIER: {}}}},
    )


#: What a required tool's caller is told when its call cannot become a task.
_REFUSALS = {
    "quota": "This tool runs only as a task, and this caller holds as many tasks as it "
    "may (max_tasks_per_scope): retry once one has ended and expired.",
    "full": "This tool runs only as a task, and the server holds as many tasks as it "
    "may (max_tasks): retry later.",
    "unavailable": "This tool runs only as a task, and the task storage does not answer: "
    "retry shortly.",
    "shutdown": "This tool runs only as a task, and this server is shutting down: retry.",
}


def _with_rejection(result: Any, reason: str) -> Any:
    """*result* of a plain call that could have been a task, its ``_meta`` saying why
    it was not (``io.github.mcp-cancellation/taskRejected``)."""
    meta = getattr(result, "meta", None)
    if hasattr(result, "meta") and (meta is None or isinstance(meta, dict)):
        result.meta = {**(meta or {}), REJECTED_META: reason}
    return result


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
