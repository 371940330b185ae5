"""A suite stopped with SIGTERM (a cancelled CI job) stops the servers its fixtures started,
as one stopped with Ctrl-C does (``tests/conftest.py``'s ``pytest_configure``); and a
server whose start is interrupted (or times out) is stopped too, though no test got it."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from .. import support
from ..support import (
    RedisServer,
    ServerLog,
    project_root,
    start_on_free_port,
    stop_process,
    wait_until,
)

# Run by a pytest of its own, with this suite's conftest as a plugin: it starts the
# session's real redis-server, says which processes it and that server are, and waits to
# be stopped.
_BLOCKED_TEST = """
import os
import threading
from pathlib import Path

import pytest

#: (Each builds a wheel or a virtualenv: seconds, left out of ./dev quick.)
pytestmark = pytest.mark.slow


@pytest.mark.redis
def test_blocked(redis_server):
    written = Path(os.environ["SERVER_PID_FILE"] + ".part")
    written.write_text(f"{os.getpid()} {redis_server.process.pid}")
    written.rename(os.environ["SERVER_PID_FILE"])  # whole, or not there yet
    threading.Event().wait(100)
"""


def _running(pid: int) -> bool:
    """Whether *pid* is a live process (a zombie waiting to be reaped is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _stop_blocked_suite(tmp_path: Path, command: list[str], env: dict[str, str]) -> None:
    """Run *command*, a pytest whose one test starts the session's redis-server and blocks;
    SIGTERM the process it started once the server runs; assert that pytest exits
    "interrupted" and that the server is gone."""
    (tmp_path / "test_blocked.py").write_text(_BLOCKED_TEST)
    pid_file = tmp_path / "server.pid"
    log = ServerLog("the interrupted pytest", tmp_path / "pytest.log")
    with log.path.open("wb") as out:
        suite = subprocess.Popen(
            [
                *command,
                "-c",
                str(project_root() / "pyproject.toml"),
                "-p",
                "tests.conftest",
                "-p",
                "no:cacheprovider",
                str(tmp_path / "test_blocked.py"),
            ],
            cwd=project_root(),
            env={**os.environ, **env, "SERVER_PID_FILE": str(pid_file)},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    inner = server = 0
    try:
        wait_until(lambda: pid_file.exists() or suite.poll() is not None, 90)
        assert suite.poll() is None, "the inner suite ended before its test blocked"
        inner, server = map(int, pid_file.read_text().split())
        assert _running(server)

        suite.send_signal(signal.SIGTERM)
        assert suite.wait(timeout=30) == 2  # pytest's "interrupted"
        wait_until(lambda: not _running(server), 10)
        assert "KeyboardInterrupt" in log.path.read_text()
    finally:
        stop_process(suite)
        for pid in (inner, server):  # left running only if the test failed
            if pid and _running(pid):
                os.kill(pid, signal.SIGKILL)


def test_sigterm_stops_the_servers_the_suite_started(tmp_path: Path) -> None:
    _stop_blocked_suite(tmp_path, [sys.executable, "-m", "pytest"], {})


def test_sigterm_to_dev_test_reaches_pytest(tmp_path: Path) -> None:
    """``./dev test`` (what CI runs) ends by exec'ing pytest: a SIGTERM sent to the process
    CI started stops the suite and its servers, not only the shell around it."""
    venv = Path(sys.prefix)
    stamp = venv / ".mcp-cancellation-test"
    wanted = hashlib.sha256((project_root() / "pyproject.toml").read_bytes()).hexdigest()
    if not stamp.exists() or stamp.read_text().strip() != wanted:
        # ./dev would first install the test profile into this interpreter's environment.
        pytest.skip(f"{venv} is not set up by ./dev test for this pyproject.toml")
    _stop_blocked_suite(
        tmp_path,
        ["bash", str(project_root() / "dev"), "test"],
        # Without the lint (run by ./dev test around this suite): what is under test is
        # how ./dev starts pytest, not whether the tree lints clean right now.
        {"MCP_CANCELLATION_VENV": str(venv), "MCP_CANCELLATION_LINT": "0"},
    )


class _Interrupted(BaseException):
    """Stands for a Ctrl-C or SIGTERM arriving while a server starts."""


def test_a_server_interrupted_while_starting_is_stopped(tmp_path: Path) -> None:
    log = ServerLog("a server that never gets ready", tmp_path / "server.log")
    started: list[subprocess.Popen[bytes]] = []

    def spawn(port: int) -> subprocess.Popen[bytes]:
        with log.path.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-c", "import time; time.sleep(60)"], stdout=out, stderr=out
            )
        started.append(process)
        return process

    def ready(port: int) -> bool:
        raise _Interrupted

    try:
        with pytest.raises(_Interrupted):
            start_on_free_port(spawn, ready, log)
        assert len(started) == 1
        assert started[0].poll() is not None  # stopped and reaped, not left running
    finally:
        for process in started:
            stop_process(process)


@pytest.mark.redis
def test_a_redis_server_interrupted_while_starting_is_stopped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = RedisServer()
    started: list[subprocess.Popen[bytes]] = []

    def interrupted(*args: object, **kwargs: object) -> None:
        # In place of the wait for "Ready to accept connections": the real redis-server
        # has been spawned, and the suite stops now.
        assert server.process is not None
        started.append(server.process)
        raise _Interrupted

    monkeypatch.setattr(support, "wait_until", interrupted)
    try:
        with pytest.raises(_Interrupted), server:
            raise AssertionError("entered a server that never started")
        assert len(started) == 1
        assert started[0].poll() is not None  # stopped and reaped, not left running
    finally:
        for process in started:
            stop_process(process)
