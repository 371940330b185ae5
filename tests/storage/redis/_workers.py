"""Real uvicorn worker processes on a shared Redis, for the multi-worker tests: each
serves the demo MCP app behind CancellationMiddleware (``tests/storage/redis/_worker.py``)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from typing import Any

import httpx

from mcp_cancellation.storage.redis import RedisStorage

from ... import jsonrpc
from ...support import ServerLog, project_root, start_on_free_port, stop_process

CALLER = "ip:127.0.0.1"  # the scope both workers derive for the test client


def _answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=1).status_code > 0
    except httpx.TransportError:
        return False


class Worker:
    """A uvicorn worker subprocess on a free port, serving once constructed: the module
    :attr:`MODULE` run with ``--port``, ``--redis-url``, ``--prefix`` and *options*."""

    MODULE = "tests.storage.redis._worker"

    def __init__(self, redis_url: str, prefix: str, **options: float) -> None:
        self.log = tempfile.NamedTemporaryFile(prefix="worker-", suffix=".log", delete=False)  # noqa: SIM115
        self.server_log = ServerLog("uvicorn worker", self.log.name)
        extra: list[str] = []
        for name, value in options.items():
            extra += [f"--{name.replace('_', '-')}", str(value)]

        def spawn(port: int) -> subprocess.Popen[bytes]:
            return subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    self.MODULE,
                    "--port",
                    str(port),
                    "--redis-url",
                    redis_url,
                    "--prefix",
                    prefix,
                    *extra,
                ],
                cwd=project_root(),
                stdout=self.log,
                stderr=subprocess.STDOUT,
            )

        self.port, self.process = start_on_free_port(spawn, _answers, self.server_log)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        stop_process(self.process)
        self.log.close()
        self.server_log.keep()
        os.unlink(self.log.name)

    def output(self) -> str:
        with open(self.log.name, encoding="utf-8", errors="replace") as fh:
            return fh.read()


def call_body(request_id: int, seconds: int) -> dict[str, Any]:
    """A call of the demo's ``slow_count`` tool, *seconds* long."""
    return jsonrpc.call_body(request_id, "slow_count", {"seconds": seconds})


async def tracked(observer: RedisStorage, request_id: int) -> bool:
    with contextlib.suppress(Exception):
        return await observer.is_tracked(CALLER, str(request_id))
    return False


async def empty(observer: RedisStorage) -> bool:
    """Whether the shared table holds no row at all."""
    stats = await observer.stats()
    return stats.total_rows == 0 and stats.total_in_flight == 0
