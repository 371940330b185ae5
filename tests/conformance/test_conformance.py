"""The official MCP conformance suite (``@modelcontextprotocol/conformance``, on Node 22
from the npm registry) against the "everything" server of ``_server.py``: behind
``CancellationMiddleware`` a server passes every check the bare SDK server passes, at
each protocol version the suite knows, and with ``TasksExtension`` on Redis it passes
every ``tasks-*`` check but the one the suite gets wrong (named below, with why)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ..support import RedisServer, ServerLog, project_root, start_on_free_port, stop_process

pytestmark = pytest.mark.e2e

#: The suite (the release the official python-sdk's CI pins, or newer) and the Node it
#: needs (the npm package ``node`` ships the binary).
REQUIREMENT = ("node@22", "@modelcontextprotocol/conformance@0.2.0-alpha.12")
TOOLS = Path(os.environ.get("MCP_CANCELLATION_CONFORMANCE_DIR", project_root() / ".conformance"))
VERSIONS = ["2025-11-25", "2026-07-28"]
TASK_SCENARIOS = [
    "tasks-lifecycle",
    "tasks-capability-negotiation",
    "tasks-wire-fields",
    "tasks-request-state-removal",
    "tasks-mrtr-input",
    "tasks-request-headers",
    "tasks-dispatch-and-envelope",
    "tasks-status-notifications",
    "tasks-required-task-error",
    "tasks-mrtr-composition",
]
#: The suite's own defect: ``wire-schema-valid`` checks every ``tools/call`` answer
#: against ``CallToolResult``'s schema, so a ``CreateTaskResult`` (``resultType:
#: "task"``, no ``content``, as SEP-2663 defines it) fails it; fastmcp-tasks fails it
#: too. The check passes only when every violation it reports is that one.
SUITE_DEFECT = "CallToolResult: must have required property 'content'"
#: The run's time stamp the suite adds to each scenario's output directory.
STAMPED = re.compile(r"-\d{4}-\d{2}-\d{2}T[\d-]+Z$")


@pytest.fixture(scope="session")
def conformance() -> list[str]:
    """The command that runs the suite, installed from the npm registry into
    ``.conformance/`` on first use and whenever the requirement changes."""
    marker = TOOLS / ".requirement"
    wanted = " ".join(REQUIREMENT)
    node = TOOLS / "node_modules" / ".bin" / "node"
    cli = TOOLS / "node_modules" / ".bin" / "conformance"
    if not (node.exists() and cli.exists() and marker.exists() and marker.read_text() == wanted):
        TOOLS.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(TOOLS), *REQUIREMENT],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if done.returncode != 0:
            raise RuntimeError(f"npm install {wanted} failed:\n{done.stderr[-4000:]}")
        marker.write_text(wanted)
    return [str(node), str(cli)]


class Server:
    """``_server.py`` in a process of its own, on a free port."""

    def __init__(self, *options: str) -> None:
        self.log_file = tempfile.NamedTemporaryFile(  # noqa: SIM115 (closed by stop())
            prefix="conformance-", suffix=".log", delete=False
        )
        self.log = ServerLog("conformance server " + " ".join(options), self.log_file.name)

        def spawn(port: int) -> subprocess.Popen[bytes]:
            command = [sys.executable, "-m", "tests.conformance._server", "--port", str(port)]
            return subprocess.Popen(
                [*command, *options],
                cwd=project_root(),
                stdout=self.log_file,
                stderr=subprocess.STDOUT,
            )

        self.port, self.process = start_on_free_port(spawn, _answers, self.log)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def stop(self) -> None:
        stop_process(self.process)
        self.log_file.close()
        self.log.keep()
        os.unlink(self.log_file.name)


def _answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/mcp", timeout=1).status_code > 0
    except httpx.TransportError:
        return False


def run_suite(command: list[str], url: str, out: Path, *arguments: str) -> dict[str, Any]:
    """Run the suite; every check it made, by ``<scenario>/<check id>``."""
    done = subprocess.run(
        [*command, "server", "--url", url, "-o", str(out), *arguments],
        capture_output=True,
        text=True,
        timeout=600,
    )
    checks: dict[str, Any] = {}
    for found in sorted(out.glob("server-*/checks.json")):
        scenario = STAMPED.sub("", found.parent.name.removeprefix("server-"))
        for check in json.loads(found.read_text()):
            checks[f"{scenario}/{check['id']}"] = check
    assert checks, f"the suite reported nothing:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return checks


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[Server, Server]]:
    bare = Server()
    try:
        behind = Server("--middleware")
    except BaseException:
        bare.stop()
        raise
    try:
        yield bare, behind
    finally:
        bare.stop()
        behind.stop()


@pytest.mark.parametrize("version", VERSIONS)
def test_behind_the_middleware_the_server_passes_what_the_bare_sdk_passes(
    conformance: list[str], servers: tuple[Server, Server], version: str, tmp_path: Path
) -> None:
    bare, behind = servers
    base = run_suite(
        conformance, bare.url, tmp_path / "bare", "--suite", "all", "--spec-version", version
    )
    ours = run_suite(
        conformance, behind.url, tmp_path / "ours", "--suite", "all", "--spec-version", version
    )
    passed = {key for key, check in base.items() if check["status"] == "SUCCESS"}
    assert len(passed) >= 50, sorted(passed)  # the suite ran, and the bare server is real
    lost = {
        key: ours.get(key, {}).get("errorMessage", "not run")
        for key in passed
        if ours.get(key, {}).get("status") != "SUCCESS"
    }
    assert not lost, lost
    assert set(ours) == set(base)


@pytest.mark.redis
def test_the_tasks_server_on_redis_passes_every_tasks_check(
    conformance: list[str], redis_server: RedisServer, tmp_path: Path
) -> None:
    server = Server(
        "--tasks", "--redis-url", redis_server.url, "--prefix", f"conf-{uuid.uuid4().hex[:8]}"
    )
    try:
        checks: dict[str, Any] = {}
        for scenario in TASK_SCENARIOS:
            checks.update(
                run_suite(conformance, server.url, tmp_path / scenario, "--scenario", scenario)
            )
    finally:
        server.stop()
    ran = {key.split("/", 1)[0] for key in checks}
    # (tasks-status-notifications is the suite's own skip: 0 checks, pending a rewrite.)
    assert ran >= set(TASK_SCENARIOS) - {"tasks-status-notifications"}, sorted(ran)
    failed = {}
    for key, check in checks.items():
        if check["status"] in ("SUCCESS", "INFO", "SKIPPED"):
            continue
        if key.endswith("/wire-schema-valid") and _only_the_suite_defect(check):
            continue
        failed[key] = check.get("errorMessage")
    assert not failed, failed
    assert sum(c["status"] == "SUCCESS" for c in checks.values()) >= 30


def _only_the_suite_defect(check: dict[str, Any]) -> bool:
    violations = (check.get("details") or {}).get("violations") or []
    return bool(violations) and all(
        v.get("message", {}).get("result", {}).get("resultType") == "task"
        and all(SUITE_DEFECT in error for error in v.get("errors", []))
        for v in violations
    )
