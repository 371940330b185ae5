"""A task's run on the worker that created it: its tool under a registry request keyed by
(scope, task id), its progress and input through the task table, and its end written
there, once (docs/architecture.md, "Tasks").

A run starts before its task is recorded: for its ``input_window`` the tool runs as the
call it is, and one that answers with an ``InputRequiredResult`` (it asks for input
first, SEP-2322) is answered directly, without a task. The extension then *decides*:
the task is recorded (the run writes its state and end from then on), or the call is
answered directly (the run writes nothing to the table).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import logging
import time
import uuid
from typing import TYPE_CHECKING, Any, cast

from .._errors import REQUEST_CANCELLED, RequestCancelled, StorageUnavailable
from .._extras import requires
from .._token import cancellation_error_type
from ..signals import task_ended
from ..storage._task_table import ANSWER_PREFIX, ENDER, INPUT_PREFIX, TERMINAL, TaskRecord

with requires("mcp", "mcp_cancellation.tasks"):
    from mcp.server.session import ServerSession
    from mcp.shared.exceptions import MCPError
    from mcp_types.jsonrpc import INTERNAL_ERROR

if TYPE_CHECKING:
    from mcp.server.context import CallNext, ServerRequestContext

    from .._token import RequestToken
    from ._extension import TasksExtension

__all__ = ["TaskRun", "now_ms"]

logger = logging.getLogger("mcp_cancellation.tasks")

#: How often the run checks whether a cancelled tool outran ``kill_after`` (seconds).
WATCH_INTERVAL = 0.1
#: How often a tool waiting for input looks at its own cancellation (seconds; local only:
#: the answer itself is pushed, and the table is read only when one arrives).
CANCEL_CHECK = 0.25
#: How many times a task's end is written before it is given up (Redis down).
END_ATTEMPTS = 20

#: The errors a task ends ``failed`` with when this package stops it.
STOPPED = "The server stopped before the task finished."
TOO_LARGE = "The task's result is larger than the server keeps ({limit} bytes)."
#: The reason its token carries when this worker learns that its task was ended elsewhere.
FENCED = "the task was ended while this worker did not answer"


def now_ms() -> int:
    """Wall-clock milliseconds (the wire's timestamps)."""
    return int(time.time() * 1000)


def end_fields(
    status: str, result: str | None, error: str | None, reason: str | None
) -> dict[str, str]:
    """The fields of a task's end: its status, result or error, its ``statusMessage``
    (the error's message, or the cancellation's *reason*), and its ``.ender`` (should a
    call time out and run all the same, the write retried is taken as written, and the
    run reports the end it wrote)."""
    fields = {"status": status, "updated": str(now_ms()), ENDER: uuid.uuid4().hex}
    if result is not None:
        fields["result"] = result
    if error is not None:
        fields["error"] = error
    if status == "failed" and error is not None:
        fields["message"] = json.loads(error)["message"]
    elif status == "cancelled":
        fields["message"] = reason or "Task cancelled"
    return fields


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
        self._asking = 0
        self.token: RequestToken | None = None
        #: Set when this worker learns that the task ended elsewhere (its worker was taken
        #: for dead): the tool is stopped and nothing more is written.
        self.fenced = False
        #: Set when the server stops: a cancelled tool then ends the task ``failed``.
        self.stopping = False
        #: Whether this run wrote its task's end (and sent ``task.ended``).
        self.ended = False
        #: Set once the tool runs; the input window counts from then.
        self.started = asyncio.Event()
        #: Set when the tool asks for input before the decision (it needs a task now).
        self.asked = asyncio.Event()
        #: Set once the tool's work is over: :attr:`value` or :attr:`error` holds it.
        self.finished = asyncio.Event()
        self.value: Any = None
        self.error: BaseException | None = None
        #: The tool's asyncio task while it runs (a fence cancels it at once).
        self._tool: asyncio.Future[Any] | None = None
        #: Set by the extension: the task is recorded (:attr:`recorded`) or not.
        self.decided = asyncio.Event()
        self.recorded = False

    async def run(self) -> None:
        registry = self.extension.registry
        record = self.record
        status: str = "failed"
        result: str | None = None
        error: str | None = _error(INTERNAL_ERROR, "The task did not run.")
        try:
            # No labels: a task's run is not an MCP operation (its tools/call answered at
            # once, and was counted then).
            # Tracked at its start (never a young call): every moment of a task is listed,
            # and an operator's cancel reaches it.
            request = registry.request(record.task_id, record.scope, tool=self.tool, at_start=True)
            async with request as token:
                self.token = token
                if self.fenced:  # (fenced before its request began)
                    registry.cancel_token(token, FENCED)
                try:
                    status, result, error = await self._work(token)
                finally:
                    self.finished.set()
                await self.decided.wait()
                if not self.recorded:
                    return  # answered directly: nothing of it is in the table
                # The end is written before the request leaves the table: a tasks/cancel
                # that still finds the task active finds its request too (no pending row
                # outlives the task).
                await self._end(status, result, error)
                return
        except StorageUnavailable as exc:
            logger.warning("task %s not tracked: %s", record.task_id, exc)
            error = _error(INTERNAL_ERROR, "Task storage unavailable.")
            self.error = exc
        except Exception as exc:
            logger.exception("task %s failed", record.task_id)
            self.error = exc
        finally:
            self.finished.set()
        await self.decided.wait()
        if self.recorded and not self.ended:
            await self._end(status, result, error)

    def decide(self, recorded: bool) -> None:
        """The extension's decision: the task is recorded, or the call is answered
        directly (then the run writes nothing to the table)."""
        self.recorded = recorded
        self.decided.set()

    def answer(self) -> Any:
        """The call's direct answer: the tool's value, or its exception raised."""
        if self.error is not None:
            raise self.error
        return self.value

    async def _work(self, token: RequestToken) -> tuple[str, str | None, str | None]:
        """Run the tool; its end as (status, encoded result, encoded error)."""
        session = _TaskSession(self.ctx.session, self, token)
        task_ctx = dataclasses.replace(self.ctx, session=cast("ServerSession", session))
        work = self._tool = asyncio.ensure_future(self.call_next(task_ctx))
        if self.fenced:
            work.cancel()
        self.started.set()
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
        except asyncio.CancelledError as exc:
            if not (killed or self.fenced):
                raise
            self.error = exc
            return self._cancelled()
        except RequestCancelled as exc:
            self.error = exc
            return self._cancelled()
        except Exception as exc:
            self.error = exc
            code, message = _code_of(exc)
            if code == REQUEST_CANCELLED or token.cancelled:
                return self._cancelled()
            return "failed", None, _error(code, message)
        self.value = value
        if token.cancelled:
            return self._cancelled()
        encoded = _encode_result(value)
        limit = self.extension.max_result_bytes
        if len(encoded.encode("utf-8")) > limit:
            return "failed", None, _error(INTERNAL_ERROR, TOO_LARGE.format(limit=limit))
        return "completed", encoded, None

    def _cancelled(self) -> tuple[str, str | None, str | None]:
        if self.stopping:
            return "failed", None, _error(INTERNAL_ERROR, STOPPED)
        return "cancelled", None, _error(REQUEST_CANCELLED, "Task cancelled")

    def fence(self) -> None:
        """The task ended elsewhere (failed while this worker did not answer), and its
        client may have read that end: the tool is interrupted at once, at its next await
        (``kill_after`` does not apply: nothing it does now can be reported), and nothing
        more is written. A tool in a thread runs on until it polls ``cancelled()``."""
        if self.fenced:
            return
        self.fenced = True
        logger.warning(
            "task %s was ended while this worker did not answer: stopping its tool",
            self.record.task_id,
        )
        if self.token is not None:
            self.extension.registry.cancel_token(self.token, FENCED)
        if self._tool is not None:
            self._tool.cancel()

    def stop(self) -> None:
        """The server stops: cancel the tool (``kill_after`` applies); it ends ``failed``."""
        self.stopping = True
        if self.token is not None:
            self.extension.registry.cancel_token(self.token, STOPPED)

    async def end_stopped(self) -> None:
        """Write the end of a task whose tool was stopped by force at shutdown."""
        if not self.ended:
            await self._end("failed", None, _error(INTERNAL_ERROR, STOPPED))

    async def _end(self, status: str, result: str | None, error: str | None) -> None:
        """Write the task's end (retried while the table does not answer) and, if this
        write ended it, say so: a task ends once, whoever ends it."""
        self.ended = True
        if self.fenced:
            return
        record = self.record
        reason = self.token.reason if self.token is not None else None
        fields = end_fields(status, result, error, reason)
        table = self.extension.table
        written = False
        delay = 0.05
        for _ in range(END_ATTEMPTS):
            try:
                written = await table.write(record.scope, record.task_id, fields)
                if not written and await table.claim(record) == "restored":
                    # The table was lost before this worker's resync rewrote the task.
                    written = await table.write(record.scope, record.task_id, fields)
                break
            except StorageUnavailable:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
        else:
            logger.warning("the end of task %s was not recorded", record.task_id)
            return
        if not written:
            logger.warning(
                "task %s had already ended (its worker was taken for dead): "
                "its tool's end (%s) is not recorded",
                record.task_id,
                status,
            )
            return
        if status == "cancelled":
            logger.info(
                "task %s in scope %s cancelled: %s", record.task_id, record.scope, fields["message"]
            )
        if task_ended.receivers:
            seconds = max(0.0, (now_ms() - record.created_ms) / 1000)
            task_ended.send(
                self.extension.registry,
                task_id=record.task_id,
                scope=record.scope,
                tool=self.tool,
                status=status,
                seconds=seconds,
            )

    async def write(self, fields: dict[str, str]) -> None:
        """Write the running task's state (progress, input); a table that does not
        answer loses a progress message, never the task. Before the decision it waits
        for it; a call answered directly writes nothing."""
        await self.decided.wait()
        if not self.recorded:
            return
        fields["updated"] = str(now_ms())
        try:
            written = await self.extension.table.write(
                self.record.scope, self.record.task_id, fields
            )
        except StorageUnavailable as exc:
            logger.warning("task %s: state not written: %s", self.record.task_id, exc)
            return
        if not written:
            found = await self._read()
            if found is not None and found.status in TERMINAL:
                self.fence()

    async def _read(self) -> TaskRecord | None:
        try:
            return await self.extension.table.get(self.record.scope, self.record.task_id, "")
        except StorageUnavailable:
            return self.record

    async def ask(self, request: dict[str, Any], token: RequestToken) -> dict[str, Any]:
        """Put *request* to the client (``input_required``) and wait for its answer,
        which a ``tasks/update`` on any worker writes and pushes here: nothing is read
        while nothing arrives."""
        if not self.decided.is_set():  # asked within its input window: a task now
            self.asked.set()
            await self.decided.wait()
        if not self.recorded:
            raise MCPError(
                INTERNAL_ERROR,
                "The tool asks for input, which needs a task, and no task was created.",
            )
        key = f"input-{next(self._keys)}"
        record = self.record
        table = self.extension.table
        self._asking += 1
        try:
            with table.watch(record.scope, record.task_id) as changed:
                await self.write(
                    {"status": "input_required", INPUT_PREFIX + key: json.dumps(request)}
                )
                while True:
                    changed.clear()
                    _stop_if_cancelled(token)
                    found = await self._read()
                    if found is None or found.status in TERMINAL:
                        raise MCPError(REQUEST_CANCELLED, "The task ended while it waited.")
                    answer = found.answers.get(key)
                    if answer is not None:
                        break
                    while not changed.is_set():
                        _stop_if_cancelled(token)
                        try:
                            async with asyncio.timeout(CANCEL_CHECK):
                                await changed.wait()
                        except TimeoutError:
                            pass
        finally:
            self._asking -= 1
        fields = {INPUT_PREFIX + key: "", ANSWER_PREFIX + key: ""}
        if not self._asking:  # (another question of this task may still wait)
            fields["status"] = "working"
        await self.write(fields)
        decoded: dict[str, Any] = json.loads(answer)
        return decoded


class _TaskSession:
    """The session a task's tool sees. A task has no back-channel (its ``tools/call``
    was answered with the handle): every server-to-client request (elicitation in both
    modes, sampling, roots, ping) becomes one of its ``inputRequests``, answered through
    ``tasks/update``; progress goes to its ``statusMessage``; log messages and other
    notifications go to this server's log (``mcp_cancellation.tasks``, DEBUG), not to the
    client. The SDK's own methods run with this object as their session, so each one
    builds its request as usual and sends it here."""

    def __init__(self, session: Any, run: TaskRun, token: RequestToken) -> None:
        self._session = session
        self._run = run
        self._token = token

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)

    create_message = ServerSession.create_message
    elicit = ServerSession.elicit
    elicit_form = ServerSession.elicit_form
    elicit_url = ServerSession.elicit_url
    list_roots = ServerSession.list_roots
    send_ping = ServerSession.send_ping

    async def send_request(
        self,
        request: Any,
        result_type: Any,
        request_read_timeout_seconds: float | None = None,
        metadata: Any = None,
        progress_callback: Any = None,
    ) -> Any:
        data = request.model_dump(by_alias=True, mode="json", exclude_none=True)
        answer = await self._run.ask(data, self._token)
        return result_type.model_validate(answer, by_name=False)

    async def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        if message is None:
            message = f"{progress:g}/{total:g}" if total else f"{progress:g}"
        await self._run.write({"message": message})

    async def send_progress_notification(
        self,
        progress_token: Any,
        progress: float,
        total: float | None = None,
        message: str | None = None,
        related_request_id: Any = None,
    ) -> None:
        await self.report_progress(progress, total, message)

    async def send_log_message(
        self, level: Any, data: Any, logger: str | None = None, related_request_id: Any = None
    ) -> None:
        _log_dropped("log message", level=level, data=data, name=logger)

    async def send_notification(self, notification: Any, related_request_id: Any = None) -> None:
        _log_dropped("notification", notification=notification)


def _stop_if_cancelled(token: RequestToken) -> None:
    """Stop a wait for input of a cancelled task quietly: with the cancellation error an
    integration set (FastMCP's, which it passes up without a traceback), else as a
    protocol error, which the SDK passes up quietly (any other exception from a tool it
    logs as a crash)."""
    if token.cancelled:
        if cancellation_error_type.get() is not RequestCancelled:
            token.raise_if_cancelled()
        token.mark_observed()
        raise MCPError(REQUEST_CANCELLED, token.reason or "Task cancelled")


def _log_dropped(what: str, **details: Any) -> None:
    logger.debug("a task has no stream: its %s is not sent (%r)", what, details)


def _code_of(exc: Exception) -> tuple[int, str]:
    error = getattr(exc, "error", None)
    code = getattr(error, "code", None)
    message = getattr(error, "message", None)
    if isinstance(code, int) and isinstance(message, str):
        return code, message
    return INTERNAL_ERROR, "The task's tool failed."


def _encode_result(value: object) -> str:
    dump = getattr(value, "model_dump", None)
    data = dump(by_alias=True, mode="json", exclude_none=True) if callable(dump) else (value or {})
    if isinstance(data, dict):
        data.pop("resultType", None)
    return json.dumps(data, separators=(",", ":"))
