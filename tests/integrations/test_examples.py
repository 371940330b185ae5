"""The example servers run as their docstrings say, and ``examples/client_cancel.py``
cancels a call on each three ways; each server logs one line per cancelled call (the SDK
example without configuring logging: MCPServer's Rich root handler does not fold it)."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest

from ..support import ServerLog, project_root, start_on_free_port, wait_until

pytestmark = pytest.mark.e2e


def _answers(url: str) -> bool:
    try:
        httpx.post(url, json={}, timeout=1, trust_env=False)
    except httpx.HTTPError:
        return False
    return True


@pytest.mark.parametrize(
    ("example", "options"),
    [
        ("sdk_server.py", ()),
        ("sdk_server.py", ("--json-response",)),
        ("fastmcp_server.py", ()),
        ("fastmcp_server.py", ("--fastmcp-run",)),
    ],
)
def test_an_example_server_cancels_three_ways_and_logs_each(
    example: str, options: tuple[str, ...], tmp_path: pytest.TempPathFactory
) -> None:
    log = tmp_path / "server.log"  # type: ignore[operator]
    server_log = ServerLog(f"examples/{example}", log)
    root = project_root()

    def spawn(port: int) -> subprocess.Popen[bytes]:
        with log.open("wb") as out:
            return subprocess.Popen(
                [sys.executable, str(root / "examples" / example), "--port", str(port), *options],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=root,
            )

    port, server = start_on_free_port(
        spawn, lambda port: _answers(f"http://127.0.0.1:{port}/mcp"), server_log
    )
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        client = subprocess.run(
            [sys.executable, str(root / "examples" / "client_cancel.py"), "--url", url],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert client.returncode == 0, client.stdout + client.stderr

        def lines() -> list[str]:
            text = log.read_text(encoding="utf-8", errors="replace")
            return [line for line in text.splitlines() if "cancelled request " in line]

        wait_until(lambda: len(lines()) >= 3, timeout=10)
    finally:
        server.terminate()
        server.wait(timeout=15)
    found = lines()
    assert len(found) == 3, found
    assert all(line.startswith("INFO mcp_cancellation.asgi: ") for line in found), found
    assert all(": stopped " in line for line in found), found
    assert all(f" pid {server.pid}):" in line for line in found), found
    text = log.read_text(encoding="utf-8", errors="replace")
    assert "Traceback" not in text
