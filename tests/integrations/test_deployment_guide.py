"""The application module of docs/deployment.md, run as that page says: ``uvicorn
myserver:app --workers 2``, or gunicorn with the page's ``gunicorn.conf.py``, on a shared
Redis with ``PROMETHEUS_MULTIPROC_DIR``. Every call is cancelled whichever worker its
notification reaches, and ``/metrics`` answers at ``/metrics`` itself with the counts of
both workers and the table read once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import httpx
import pytest

from mcp_cancellation import REQUEST_CANCELLED, CancellationRegistry
from mcp_cancellation.storage.redis import RedisStorage

from ..jsonrpc import SSE_AND_JSON, call_body, cancel_body, final_message
from ..support import (
    RedisServer,
    ServerLog,
    async_wait_until,
    project_root,
    start_on_free_port,
    stop_process,
)
from ..telemetry._util import Samples, samples, value

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

WORKERS = 2
CALLS = 8
PREFIX = "my-server"  # the module's own prefix
#: The page's commands, with two workers and a test's ``{port}``.
COMMANDS = {
    "uvicorn": [
        *(sys.executable, "-m", "uvicorn", "myserver:app", "--workers", str(WORKERS)),
        *("--host", "127.0.0.1", "--port", "{port}"),
    ],
    "gunicorn": [
        *(sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "myserver:app"),
        *("--workers", str(WORKERS), "--bind", "127.0.0.1:{port}"),
    ],
}


def _block_of_the_guide(first_line: str) -> str:
    """The code block of docs/deployment.md that starts with *first_line*, as a user would
    copy it."""
    text = (project_root() / "docs" / "deployment.md").read_text(encoding="utf-8")
    start = text.index(first_line + "\n")
    return text[start : text.index("```", start)]


def _startups(log: Path) -> int:
    return log.read_text(encoding="utf-8", errors="replace").count("Application startup complete")


def _serve_the_guide(
    tmp_path: Path, redis_server: RedisServer, server: str
) -> tuple[int, subprocess.Popen[bytes], Path, ServerLog]:
    """The guide's files written as a user copies them, served by *server* with the
    page's command (two workers, ``PROMETHEUS_MULTIPROC_DIR``) once every worker started:
    its port, process, log and the log's reader."""
    for name in ("myserver.py", "gunicorn.conf.py"):
        block = _block_of_the_guide(f"# {name}")
        (tmp_path / name).write_text(block, encoding="utf-8")
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    log = tmp_path / f"{server}.log"
    server_log = ServerLog(f"{server} myserver:app, {WORKERS} workers", log)
    environ = dict(
        os.environ,
        MCP_CANCELLATION_REDIS_URL=redis_server.url,
        PROMETHEUS_MULTIPROC_DIR=str(metrics_dir),
    )

    def spawn(port: int) -> subprocess.Popen[bytes]:
        with log.open("wb") as out:
            return subprocess.Popen(
                [arg.format(port=port) for arg in COMMANDS[server]],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=tmp_path,
                env=environ,
            )

    port, process = start_on_free_port(spawn, lambda _: _startups(log) >= WORKERS, server_log)
    return port, process, log, server_log


@pytest.mark.parametrize("server", ["uvicorn", "gunicorn"])
async def test_the_guides_module_cancels_across_workers_and_serves_their_metrics(
    tmp_path: Path, redis_server: RedisServer, server: str
) -> None:
    port, process, log, server_log = _serve_the_guide(tmp_path, redis_server, server)
    observer = CancellationRegistry(
        RedisStorage.from_url(redis_server.url, prefix=PREFIX), janitor_interval=None
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        # No kept-alive connections: each POST is a new connection, accepted by whichever
        # worker takes it, so calls and notifications spread over both.
        limits = httpx.Limits(max_keepalive_connections=0)
        async with httpx.AsyncClient(timeout=30, limits=limits, trust_env=False) as http:
            answers: dict[int, httpx.Response] = {}

            async def call(request_id: int) -> None:
                body = call_body(request_id, "long_job", {"steps": 600})  # about 60 s
                answers[request_id] = await http.post(url, json=body, headers=SSE_AND_JSON)

            async def in_flight() -> bool:
                return (await observer.stats()).total_in_flight == CALLS

            async with anyio.create_task_group() as tg:
                for request_id in range(CALLS):
                    tg.start_soon(call, request_id)
                await async_wait_until(in_flight, within=30)
                for request_id in range(CALLS):
                    notification = cancel_body(request_id, f"stop {request_id}")
                    answer = await http.post(url, json=notification, headers=SSE_AND_JSON)
                    assert answer.status_code == 202, answer.text
            for request_id, response in answers.items():
                error = final_message(response)["error"]
                assert error["code"] == REQUEST_CANCELLED
                assert error["data"] == {"reason": f"stop {request_id}"}

            async def table_empty() -> bool:
                stats = await observer.stats()
                return stats.total_rows == 0 and stats.total_in_flight == 0

            await async_wait_until(table_empty, within=15)

            # Both workers' counts, from the multiprocess directory; the table once.
            parsed: Samples = {}
            stopped = frozenset({"outcome": "stopped", "scope_kind": "ip"}.items())
            stops = ("mcp_cancellation_cancel_to_stop_seconds_count", stopped)

            async def counted() -> bool:
                nonlocal parsed
                response = await http.get(f"http://127.0.0.1:{port}/metrics")
                assert response.status_code == 200, response.status_code  # no redirect
                parsed = samples(response.text)
                return parsed.get(stops) == CALLS

            await async_wait_until(counted, within=15)
            assert value(parsed, "mcp_cancellation_cancelled_total", scope_kind="ip") == CALLS
            storage = f"{redis_server.url}?prefix={PREFIX}"
            assert value(parsed, "mcp_cancellation_rows", storage=storage, scope_kind="ip") == 0
            assert value(parsed, "mcp_cancellation_storage_up", storage=storage) == 1
    finally:
        await observer.aclose()
        stop_process(process)
    text = log.read_text(encoding="utf-8", errors="replace")
    assert text.count("cancelled request") == CALLS, server_log.tail()
    assert "Traceback" not in text, server_log.tail()


async def test_tasks_running_is_the_whole_table_s_whichever_worker_answers_the_scrape(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """The guide's module, two uvicorn workers, ``PROMETHEUS_MULTIPROC_DIR``: tasks start
    on both workers and end, and every scrape, whichever worker answers it, shows the
    tasks running in the table (each scrape a new connection)."""
    from ..tasks._workers import Caller

    port, process, log, server_log = _serve_the_guide(tmp_path, redis_server, "uvicorn")
    base = f"http://127.0.0.1:{port}"
    storage = f"{redis_server.url}?prefix={PREFIX}"
    try:
        limits = httpx.Limits(max_keepalive_connections=0)  # (each POST: either worker)
        async with httpx.AsyncClient(timeout=30, limits=limits, trust_env=False) as http:
            caller = Caller(http, "192.0.2.1")

            async def running_in_every_scrape(expected: int, scrapes: int = 20) -> bool:
                for _ in range(scrapes):
                    parsed = samples((await http.get(f"{base}/metrics")).text)
                    labels = frozenset({"storage": storage, "tool": "long_job"}.items())
                    count = parsed.get(("mcp_cancellation_tasks_running", labels), 0.0)
                    if count != expected:  # (a tool with none running has no series)
                        return False
                return True

            tasks = []
            for started in range(1, 4):
                tasks.append(await caller.create(base, "long_job", {"steps": 600}))
                await async_wait_until(lambda n=started: running_in_every_scrape(n), within=15)
            for task_id in tasks:
                answer = await caller.rpc(base, "tasks/cancel", {"taskId": task_id})
                assert "result" in answer, answer
            await async_wait_until(lambda: running_in_every_scrape(0), within=30)
    finally:
        stop_process(process)
    assert "Traceback" not in log.read_text(encoding="utf-8", errors="replace"), server_log.tail()
