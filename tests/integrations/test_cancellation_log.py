"""Each cancelled request logs one INFO line when it ends (scope kind, id, reason, how its
work ended), and nothing else logs a traceback for it: not the SDK, not FastMCP."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import anyio
import httpx
import pytest

from ..jsonrpc import SSE_AND_JSON, call_body, cancel_body
from ..support import async_wait_until
from ._helpers import STREAM_CANCEL_TIMEOUT, Harness, Serve

pytestmark = pytest.mark.e2e

#: Loggers that do not propagate to the root (FastMCP's) are watched directly.
WATCHED = ("", "fastmcp")


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def cancellations(self) -> list[str]:
        return [
            r.getMessage()
            for r in self.records
            if r.name.startswith("mcp_cancellation") and r.getMessage().startswith("cancelled ")
        ]

    def tracebacks(self) -> list[str]:
        return [
            f"{r.name} {r.levelname}: {r.getMessage()}"
            for r in self.records
            if r.exc_info is not None and r.levelno >= logging.INFO
        ]


@pytest.fixture
def records() -> Iterator[_Records]:
    handler = _Records()
    saved = []
    for name in WATCHED:
        logger = logging.getLogger(name)
        saved.append((logger, logger.level))
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        for logger, level in saved:
            logger.removeHandler(handler)
            logger.setLevel(level)


async def test_a_cancelled_call_logs_one_line_and_no_traceback(
    serve: Serve,
    http: httpx.AsyncClient,
    records: _Records,
    flavour: str,
    json_response: bool,
) -> None:
    harness = serve(flavour, json_response=json_response)
    answers: list[httpx.Response] = []

    async def call() -> None:
        body = call_body("job-7", "poll", {"seconds": 30})
        answers.append(await http.post(harness.url, json=body, headers=SSE_AND_JSON))

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        await harness.wait_started()
        answer = await http.post(harness.url, json=cancel_body("job-7", "user pressed stop"))
        assert answer.status_code == 202
    await harness.wait_empty()  # the handler ended: its line is written
    (line,) = records.cancellations()  # exactly one
    assert line.startswith(
        "cancelled request 'job-7' (scope kind ip, reason 'user pressed stop', "
        f"{_worker(harness)}): stopped "
    ), line
    assert line.endswith(" s after the cancellation")
    assert records.tracebacks() == []


def _worker(harness: Harness) -> str:
    """Which worker served the call, as the line names it."""
    return f"worker {harness.registry.instance_id} pid {os.getpid()}"


async def test_a_tool_that_ignores_cancellation_is_killed_after_a_disconnect(
    serve: Serve, http: httpx.AsyncClient, records: _Records, flavour: str
) -> None:
    harness = serve(flavour, json_response=True)  # JSON mode: only the kill timer stops it
    async with anyio.create_task_group() as tg:

        async def call() -> None:
            await http.post(
                harness.url, json=call_body(9, "stuck", {"seconds": 30}), headers=SSE_AND_JSON
            )

        tg.start_soon(call)
        (key,) = await harness.wait_started()
        tg.cancel_scope.cancel()  # the client hangs up
    assert await harness.wait_outcome(key, "killed", "completed") == "killed"
    await async_wait_until(lambda: len(records.cancellations()) == 1)
    (line,) = records.cancellations()
    assert line.startswith(
        f"cancelled request '9' (scope kind ip, reason 'client disconnected', {_worker(harness)}): "
        "killed "
    ), line
    after = float(line.rsplit(" s after", 1)[0].rsplit(" ", 1)[1])
    assert after >= STREAM_CANCEL_TIMEOUT  # the kill came stream_cancel_timeout later
    assert records.tracebacks() == []


async def test_a_tool_that_finishes_anyway_is_logged_as_completed(
    serve: Serve, http: httpx.AsyncClient, records: _Records, flavour: str
) -> None:
    harness = serve(flavour, json_response=True)
    async with anyio.create_task_group() as tg:

        async def call() -> None:
            await http.post(
                harness.url, json=call_body(4, "hold", {"key": "h"}), headers=SSE_AND_JSON
            )

        tg.start_soon(call)
        await harness.wait_started()
        answer = await http.post(harness.url, json=cancel_body(4, "too slow"))
        assert answer.status_code == 202
        harness.log.release("h")  # the tool never looks, and returns its result
    await harness.wait_empty()
    (line,) = records.cancellations()
    assert line.startswith(
        f"cancelled request '4' (scope kind ip, reason 'too slow', {_worker(harness)}): "
        "completed anyway "
    ), line
    assert records.tracebacks() == []
