"""A task's run on the worker that created it: its tool under a registry request keyed by
(scope, task id), its progress and input through the task table, and its end written
there (docs/architecture.md, "Tasks")."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import logging
import time
from typing import TYPE_CHECKING, Any, cast

from .._errors import REQUEST_CANCELLED, RequestCancelled, StorageUnavailable
from ..signals import task_ended
from ..storage._task_table import ANSWER_PREFIX, INPUT_PREFIX, TERMINAL, TaskRecord

if TYPE_CHECKING:
    from mcp.server.context import CallNext, ServerRequestContext
    from mcp.server.session import ServerSession
    from mcp_types import ElicitResult

    from .._token import RequestToken
    from ._extension import TasksExtension

__all__ = ["TaskRun", "now_ms"]

logger = logging.getLogger("mcp_cancellation.tasks")

#: How often the run checks whether a cancelled tool outran ``kill_after`` (seconds).
WATCH_INTERVAL = 0.1
#: How often a tool waiting for input reads the table for its answer (seconds).
ANSWER_INTERVAL = 0.05
#: How many times a task's end is written before it is given up (Redis down).
END_ATTEMPTS = 20


def now_ms() -> int:
    """Wall-clock milliseconds (the wire's timestamps)."""
    return int(time.time() * 1000)


def _error(code: int, message: str) -> str:
    return json.dumps({"code": code, "message": message})


class TaskRun:
    """One task's tool, run to its end on this worker."""

    def __init__(
        self,
        extension: TasksExtension,
        record: TaskRecord,
        tool: str | None,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
    ) -> None:
        self.extension = extension
        self.record = record
        self.tool = tool
        self.ctx = ctx
        self.call_next = call_next
        self._keys = itertools.count(1)

    async def run(self) -> None:
        registry = self.extension.registry
        record = self.record
        status: str = "failed"
        result: str | None = None
        error: str | None = _error(-32603, "The task did not run.")
        try:
            # No labels: a task's run is not an MCP operation (its tools/call answered at
            # once, and was counted then).
            async with registry.request(record.task_id, record.scope, tool=self.tool) as token:
                status, result, error = await self._work(token)
        except StorageUnavailable as exc:
            logger.warning("task %s not tracked: %s", record.task_id, exc)
            error = _error(-32603, "Task storage unavailable.")
        except Exception:
            logger.exception("task %s failed", record.task_id)
        await self._end(status, result, error)

    async def _work(self, token: RequestToken) -> tuple[str, str | None, str | None]:
        """Run the tool; its end as (status, encoded result, encoded error)."""
        session = _TaskSession(self.ctx.session, self, token)
        task_ctx = dataclasses.replace(self.ctx, session=cast("ServerSession", session))
        work = asyncio.ensure_future(self.call_next(task_ctx))
        kill_after = self.extension.kill_after
        # (With no kill_after there is nothing to watch: the run just waits for its tool.)
        watch = None if kill_after is None else WATCH_INTERVAL
        killed = False
        while not work.done():
            await asyncio.wait({work}, timeout=watch)
            at = token.cancelled_at
            if (
                not work.done()
                and at is not None
                and kill_after is not None
                and time.monotonic() - at >= kill_after
            ):
                work.cancel()
                killed = True
                token.set_outcome("killed")
                break
        try:
            value = await work
        except asyncio.CancelledError:
            if not killed:
                raise
            return "cancelled", None, _error(REQUEST_CANCELLED, "Task cancelled")
        except RequestCancelled:
            return "cancelled", None, _error(REQUEST_CANCELLED, "Task cancelled")
        except Exception as exc:
            code, message = _code_of(exc)
            if code == REQUEST_CANCELLED or token.cancelled:
                return "cancelled", None, _error(REQUEST_CANCELLED, "Task cancelled")
            return "failed", None, _error(code, message)
        if token.cancelled:
            return "cancelled", None, _error(REQUEST_CANCELLED, "Task cancelled")
        encoded = _encode_result(value)
        limit = self.extension.max_result_bytes
        if len(encoded.encode("utf-8")) > limit:
            message = f"The task's result is larger than the server keeps ({limit} bytes)."
            return "failed", None, _error(-32603, message)
        return "completed", encoded, None

    async def _end(self, status: str, result: str | None, error: str | None) -> None:
        """Write the task's end (retried while the table does not answer), then say so."""
        record = self.record
        fields = {"status": status, "updated": str(now_ms())}
        if result is not None:
            fields["result"] = result
        if error is not None:
            fields["error"] = error
        delay = 0.05
        for _ in range(END_ATTEMPTS):
            try:
                await self.extension.table.update(record.scope, record.task_id, fields)
                break
            except StorageUnavailable:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
        else:
            logger.warning("the end of task %s was not recorded", record.task_id)
        if task_ended.receivers:
            task_ended.send(
                self.extension.registry,
                task_id=record.task_id,
                scope=record.scope,
                tool=self.tool,
                status=status,
                seconds=max(0.0, (now_ms() - record.created_ms) / 1000),
            )

    async def write(self, fields: dict[str, str]) -> None:
        """Write the running task's state (progress, input); a table that does not
        answer loses a progress message, never the task."""
        fields["updated"] = str(now_ms())
        try:
            await self.extension.table.update(self.record.scope, self.record.task_id, fields)
        except StorageUnavailable as exc:
            logger.warning("task %s: state not written: %s", self.record.task_id, exc)

    async def ask(self, request: dict[str, Any], token: RequestToken) -> dict[str, Any]:
        """Put *request* to the client (``input_required``) and wait for its answer,
        which a ``tasks/update`` on any worker writes."""
        key = f"input-{next(self._keys)}"
        record = self.record
        await self.write({"status": "input_required", INPUT_PREFIX + key: json.dumps(request)})
        table = self.extension.table
        while True:
            token.raise_if_cancelled()
            try:
                found = await table.get(record.scope, record.task_id, "")
            except StorageUnavailable:
                found = record
            if found is None or found.status in TERMINAL:
                raise RequestCancelled("the task ended while it waited for input")
            answer = found.answers.get(key)
            if answer is not None:
                break
            await asyncio.sleep(ANSWER_INTERVAL)
        await self.write({"status": "working", INPUT_PREFIX + key: "", ANSWER_PREFIX + key: ""})
        decoded: dict[str, Any] = json.loads(answer)
        return decoded


class _TaskSession:
    """The session a task's tool sees: the request's, except that progress goes to the
    task's ``statusMessage`` and an elicitation to its ``inputRequests`` (a task has no
    back-channel: the client reads both with ``tasks/get``)."""

    def __init__(self, session: Any, run: TaskRun, token: RequestToken) -> None:
        self._session = session
        self._run = run
        self._token = token

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)

    async def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        if message is None:
            message = f"{progress:g}/{total:g}" if total else f"{progress:g}"
        await self._run.write({"message": message})

    async def elicit_form(
        self, message: str, requested_schema: Any, related_request_id: Any = None
    ) -> ElicitResult:
        from mcp_types import ElicitRequest, ElicitRequestFormParams, ElicitResult

        params = ElicitRequestFormParams(message=message, requested_schema=requested_schema)
        request = ElicitRequest(params=params).model_dump(
            by_alias=True, mode="json", exclude_none=True
        )
        answer = await self._run.ask(request, self._token)
        return ElicitResult.model_validate(answer)


def _code_of(exc: Exception) -> tuple[int, str]:
    error = getattr(exc, "error", None)
    code = getattr(error, "code", None)
    message = getattr(error, "message", None)
    if isinstance(code, int) and isinstance(message, str):
        return code, message
    return -32603, "The task's tool failed."


def _encode_result(value: object) -> str:
    dump = getattr(value, "model_dump", None)
    data = dump(by_alias=True, mode="json", exclude_none=True) if callable(dump) else (value or {})
    if isinstance(data, dict):
        data.pop("resultType", None)
    return json.dumps(data, separators=(",", ":"))
