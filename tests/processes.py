"""Real processes that tests start: the demo server, the simulator and a Prometheus server.

Both run as subprocesses on free 127.0.0.1 ports with their own temporary directories, and
are stopped (terminate, then kill) when the block ends.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx

from .support import ServerContext, ServerLog, start_on_free_port, stop_process

__all__ = ["DemoProcess", "PrometheusServer", "binary", "start_simulator", "stop_process"]


def binary(name: str) -> str:
    """Path of a Debian ``prometheus`` package binary; fail with how to install it."""
    path = shutil.which(name)
    if path is None:  # pragma: no cover - ./dev test installs it
        raise RuntimeError(f"{name} is not installed; run ./dev test (apt-get install prometheus)")
    return path


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


def start_simulator(url: str, log: Path, *args: str) -> subprocess.Popen[bytes]:
    """``mcp-cancellation simulate --url URL/mcp ARGS --json`` in a subprocess: counts on
    stdout, its stderr in *log* (shown when the test fails)."""
    command = [sys.executable, "-m", "mcp_cancellation", "simulate", "--url", f"{url}/mcp"]
    ServerLog("mcp-cancellation simulate", log)
    with log.open("wb") as err:
        return subprocess.Popen([*command, *args, "--json"], stdout=subprocess.PIPE, stderr=err)


class _ServerProcess(ServerContext):
    """A server subprocess on a free 127.0.0.1 port, its output in its :class:`ServerLog`;
    ready once *ready_path* answers 200, stopped (terminate, then kill) by :meth:`stop`."""

    port = 0
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _launch(self, argv: Callable[[int], list[str]], ready_path: str, log: ServerLog) -> None:
        def spawn(port: int) -> subprocess.Popen[bytes]:
            with log.path.open("ab") as out:
                return subprocess.Popen(argv(port), stdout=out, stderr=subprocess.STDOUT)

        self.port, self.process = start_on_free_port(
            spawn, lambda port: _answers(f"http://127.0.0.1:{port}{ready_path}"), log
        )

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process)
            self.process = None

    def close(self) -> None:
        self.stop()


class DemoProcess(_ServerProcess):
    """``mcp-cancellation demo`` in a subprocess, exactly as a user starts it."""

    def __init__(self, *args: str, log: Path) -> None:
        self.args = args
        self.server_log = ServerLog("mcp-cancellation demo", log)

    def start(self) -> None:
        command = [sys.executable, "-m", "mcp_cancellation", "demo", "--host", "127.0.0.1"]
        self._launch(
            lambda port: [*command, "--port", str(port), *self.args], "/metrics", self.server_log
        )


class PrometheusServer(_ServerProcess):
    """A real Prometheus server on loopback, scraping *targets* every second.

    *rule_files* are copied next to the configuration; rules are evaluated every second.
    """

    def __init__(self, targets: Sequence[str], rule_files: Sequence[Path] = ()) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="mcp-cancellation-prometheus-"))
        self.targets = targets
        self.rule_files = rule_files
        self.server_log = ServerLog("prometheus", self.dir / "prometheus.log")

    def _config(self) -> str:
        rules = []
        for index, path in enumerate(self.rule_files):
            copy = self.dir / f"rules-{index}.yaml"
            shutil.copyfile(path, copy)
            rules.append(str(copy))
        targets = ", ".join(f'"{t}"' for t in self.targets)
        return (
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
            f"rule_files: [{', '.join(repr(r) for r in rules)}]\n"
            "scrape_configs:\n"
            '  - job_name: "mcp-cancellation-demo"\n'
            f"    static_configs: [{{targets: [{targets}]}}]\n"
        )

    def start(self) -> None:
        config = self.dir / "prometheus.yml"
        config.write_text(self._config(), encoding="utf-8")
        self._launch(
            lambda port: [
                binary("prometheus"),
                f"--config.file={config}",
                f"--storage.tsdb.path={self.dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--storage.tsdb.retention.time=1h",
            ],
            "/-/ready",
            self.server_log,
        )

    def close(self) -> None:
        self.stop()
        self.server_log.keep()
        shutil.rmtree(self.dir, ignore_errors=True)

    def api(self, path: str, **params: Any) -> Any:
        """GET ``/api/v1/<path>``; the ``data`` of a successful answer."""
        response = httpx.get(
            f"{self.url}/api/v1/{path}", params=params, timeout=10, trust_env=False
        )
        body = response.json()
        assert body.get("status") == "success", body
        return body["data"]

    def query(self, expr: str, time: float | None = None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"query": expr}
        if time is not None:
            params["time"] = time
        result: list[dict[str, Any]] = self.api("query", **params)["result"]
        return result

    def query_range(
        self, expr: str, start: float, end: float, step: float = 1.0
    ) -> list[dict[str, Any]]:
        data = self.api("query_range", query=expr, start=start, end=end, step=step)
        result: list[dict[str, Any]] = data["result"]
        return result

    def alerts(self) -> list[dict[str, Any]]:
        alerts: list[dict[str, Any]] = self.api("alerts")["alerts"]
        return alerts
