"""Servers for the task tests: real uvicorn workers with TasksExtension, as subprocesses
on a shared Redis (``tests/tasks/_app.py``), or one in-process server on memory."""

from __future__ import annotations

import os
import subprocess
import venv
from pathlib import Path
from typing import Any

import httpx

from ..jsonrpc import MODERN
from ..storage.redis._workers import Worker
from ..support import project_root

EXTENSION = "io.modelcontextprotocol/tasks"
#: How many tasks one scope may hold on the test servers (``_app.py``'s ``--quota``).
QUOTA = 3
HEADERS = {
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
    "mcp-protocol-version": MODERN,
}


#: What the FastMCP tasks client's virtualenv holds (any release of the 4.x line that
#: speaks SEP-2663), and where it lives (reused across runs;
#: MCP_CANCELLATION_TASKS_CLIENT_VENV overrides).
CLIENT_REQUIREMENT = "fastmcp-tasks>=4.1.4,<5"
CLIENT_VENV = Path(
    os.environ.get("MCP_CANCELLATION_TASKS_CLIENT_VENV", project_root() / ".venv-tasks-client")
)


def client_venv() -> Path:
    """The Python of the virtualenv holding FastMCP with ``fastmcp-tasks`` (which pins
    ``fastmcp-slim``, so it cannot share the project's), created from the package index on
    first use and whenever the requirement changes."""
    python = CLIENT_VENV / "bin" / "python"
    marker = CLIENT_VENV / ".requirement"
    if not python.exists() or not marker.exists() or marker.read_text() != CLIENT_REQUIREMENT:
        venv.create(CLIENT_VENV, with_pip=True, clear=True)
        command = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        done = subprocess.run(
            [*command, CLIENT_REQUIREMENT], capture_output=True, text=True, timeout=600
        )
        if done.returncode != 0:
            raise RuntimeError(f"pip install {CLIENT_REQUIREMENT} failed:\n{done.stderr}")
        marker.write_text(CLIENT_REQUIREMENT)
    return python


class TaskWorker(Worker):
    """A uvicorn worker subprocess serving ``tests/tasks/_app.py`` on a free port; its
    :attr:`url` is the server's base URL (the app serves ``/mcp`` and ``/metrics``)."""

    MODULE = "tests.tasks._app"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class FastMCPTaskWorker(TaskWorker):
    """The same, serving ``tests/tasks/_fastmcp_app.py`` (FastMCP and its extension)."""

    MODULE = "tests.tasks._fastmcp_app"


#: The worker of each server the suite runs against (conftest.FLAVORS).
WORKERS: dict[str, type[TaskWorker]] = {"sdk": TaskWorker, "fastmcp": FastMCPTaskWorker}


class Caller:
    """A raw JSON-RPC client of the tasks extension, at one address (its scope:
    ``ip:<address>``, the servers trusting the loopback proxy)."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        address: str,
        *,
        declare: bool = True,
        version: str = MODERN,
    ) -> None:
        self.http = http
        self.address = address
        self.declare = declare
        self.version = version
        self._ids = iter(range(1, 1_000_000))

    async def post(
        self,
        url: str,
        method: str,
        params: dict[str, Any],
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        capabilities: dict[str, Any] = {"extensions": {EXTENSION: {}}} if self.declare else {}
        meta = {
            "io.modelcontextprotocol/protocolVersion": self.version,
            "io.modelcontextprotocol/clientCapabilities": capabilities,
        }
        body = {
            "jsonrpc": "2.0",
            "id": next(self._ids),
            "method": method,
            "params": {**params, "_meta": meta},
        }
        sent = {
            **HEADERS,
            "mcp-protocol-version": self.version,
            "mcp-method": method,
            "x-forwarded-for": self.address,
        }
        if method == "tools/call":
            sent["mcp-name"] = params["name"]
        sent.update(headers or {})
        return await self.http.post(f"{url}/mcp", json=body, headers=sent)

    async def rpc(
        self,
        url: str,
        method: str,
        params: dict[str, Any],
        headers: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """The JSON-RPC answer (never an HTTP 5xx)."""
        response = await self.post(url, method, params, headers)
        assert response.status_code < 500, response.text
        message: dict[str, Any] = response.json()
        return message

    async def create(self, url: str, tool: str, arguments: dict[str, Any]) -> str:
        answer = await self.rpc(url, "tools/call", {"name": tool, "arguments": arguments})
        result = answer["result"]
        assert result["resultType"] == "task", answer
        task_id: str = result["taskId"]
        return task_id

    async def get(self, url: str, task_id: str) -> dict[str, Any]:
        answer = await self.rpc(url, "tasks/get", {"taskId": task_id})
        assert "result" in answer, answer
        result: dict[str, Any] = answer["result"]
        return result
