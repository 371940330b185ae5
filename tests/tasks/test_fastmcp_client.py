"""The tasks extension driven by a real SEP-2663 client this project did not write:
FastMCP's ``Client`` with ``fastmcp-tasks`` (``call_tool_task``, ``ToolTask``), in a
virtualenv of its own because ``fastmcp-tasks`` pins ``fastmcp-slim``. Each task is created
through one worker and polled, cancelled and answered through the other."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from ._workers import client_venv

pytestmark = pytest.mark.e2e

SCRIPT = Path(__file__).with_name("_fastmcp_client.py")


@pytest.fixture(scope="session")
def client_python() -> Path:
    """The Python of the FastMCP tasks client's virtualenv (created on first use)."""
    return client_venv()


def test_fastmcp_tasks_client_creates_polls_cancels_and_answers_across_workers(
    servers: tuple[str, str], client_python: Path
) -> None:
    a, b = servers
    done = subprocess.run(
        [client_python, str(SCRIPT), f"{a}/mcp", f"{b}/mcp"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["created_status"] == "working"
    assert out["task_id_chars"] >= 22
    assert out["result"] == "counted to 20"
    assert out["cancelled_status"] == "cancelled"
    assert out["cancel_to_status_seconds"] < 5
    assert out["elicited"] == "Ada & Ada"
    assert out["call_tool"] == "xxx"
