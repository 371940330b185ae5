"""A suite stopped with SIGTERM (a cancelled CI job) stops the servers its fixtures started,
as one stopped with Ctrl-C does (``tests/conftest.py``'s ``pytest_configure``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from ..support import ServerLog, project_root, stop_process, wait_until

# Run by a pytest of its own, with this suite's conftest as a plugin: it starts the
# session's real redis-server, says which process that is, and waits to be stopped.
_BLOCKED_TEST = """
import os
import threading
from pathlib import Path


def test_blocked(redis_server):
    Path(os.environ["SERVER_PID_FILE"]).write_text(str(redis_server.process.pid))
    threading.Event().wait(100)
"""


def _written(path: Path) -> bool:
    return path.exists() and bool(path.read_text())


def _running(pid: int) -> bool:
    """Whether *pid* is a live process (a zombie waiting to be reaped is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_sigterm_stops_the_servers_the_suite_started(tmp_path: Path) -> None:
    (tmp_path / "test_blocked.py").write_text(_BLOCKED_TEST)
    pid_file = tmp_path / "server.pid"
    log = ServerLog("the interrupted pytest", tmp_path / "pytest.log")
    with log.path.open("wb") as out:
        suite = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pytest",
                "-c",
                str(project_root() / "pyproject.toml"),
                "-p",
                "tests.conftest",
                "-p",
                "no:cacheprovider",
                str(tmp_path / "test_blocked.py"),
            ],
            cwd=project_root(),
            env={**os.environ, "SERVER_PID_FILE": str(pid_file)},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = 0
    try:
        wait_until(lambda: _written(pid_file) or suite.poll() is not None, 60)
        assert suite.poll() is None, "the inner suite ended before its test blocked"
        server = int(pid_file.read_text())
        assert _running(server)

        suite.send_signal(signal.SIGTERM)
        assert suite.wait(timeout=30) == 2  # pytest's "interrupted"
        wait_until(lambda: not _running(server), 10)
        assert "KeyboardInterrupt" in log.path.read_text()
    finally:
        stop_process(suite)
        if server and _running(server):
            os.kill(server, signal.SIGKILL)
