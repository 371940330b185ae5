"""The tasks extension driven by a real SEP-2663 client this project did not write:
FastMCP's ``Client`` with ``fastmcp-tasks`` (``call_tool_task``, ``ToolTask``), in a
virtualenv of its own because ``fastmcp-tasks`` pins ``fastmcp-slim``. Each task is created
through one worker and polled, cancelled and answered through the other."""

from __future__ import annotations

import json
import os
import subprocess
import venv
from pathlib import Path

import pytest

from ..support import project_root

pytestmark = pytest.mark.e2e

#: What the client's virtualenv holds (any release of the 4.x line that speaks SEP-2663).
REQUIREMENT = "fastmcp-tasks>=4.1.4,<5"
#: Where it lives (reused across runs; MCP_CANCELLATION_TASKS_CLIENT_VENV overrides).
VENV = Path(
    os.environ.get("MCP_CANCELLATION_TASKS_CLIENT_VENV", project_root() / ".venv-tasks-client")
)
SCRIPT = Path(__file__).with_name("_fastmcp_client.py")


@pytest.fixture(scope="session")
def client_python() -> Path:
    """The Python of the client's virtualenv, created (from the package index) on first
    use and whenever REQUIREMENT changes."""
    python = VENV / "bin" / "python"
    marker = VENV / ".requirement"
    if not python.exists() or not marker.exists() or marker.read_text() != REQUIREMENT:
        venv.create(VENV, with_pip=True, clear=True)
        done = subprocess.run(
            [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", REQUIREMENT],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, f"pip install {REQUIREMENT} failed:\n{done.stderr}"
        marker.write_text(REQUIREMENT)
    return python


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
