"""The demo server: what its printed instructions tell a user to do works."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client

from mcp_cancellation import CancellationRegistry, MemoryStorage
from mcp_cancellation.__main__ import build_parser
from mcp_cancellation.__main__ import main as command_main
from mcp_cancellation._client import LEGACY, with_client
from mcp_cancellation._demo import _instructions, build_demo_app, client_command, registry_from_args

from ..jsonrpc import SSE_AND_JSON, cancel_body, final_message, jsonrpc_messages
from ..support import UvicornThread, async_wait_until, stats_now, wait_until

pytestmark = pytest.mark.e2e


def test_cli_arguments() -> None:
    args = build_parser().parse_args(
        [
            "demo",
            "--port",
            "0",
            "--json-response",
            "--trusted-proxy",
            "127.0.0.1",
            "--trusted-proxy",
            "10.0.0.0/8",
            "--max-rows",
            "50",
            "--max-rows-per-scope",
            "5",
        ]
    )
    assert args.json_response
    assert args.trusted_proxy == ["127.0.0.1", "10.0.0.0/8"]
    assert (args.max_rows, args.max_rows_per_scope) == (50, 5)
    assert callable(args.run)


async def test_quota_rollout_and_grace_from_the_command_line() -> None:
    args = build_parser().parse_args(
        [
            "demo",
            *("--max-rows-per-scope", "2", "--quota-mode", "shadow", "--cancel-grace", "1.5"),
            *("--quota-override", "principal:batch=50", "--quota-override", "x=y=3"),
        ]
    )
    registry = registry_from_args(args)
    try:
        assert registry.quota_mode == "shadow"
        assert registry.cancel_grace == 1.5
        assert registry.quota_for("principal:batch") == 50
        assert registry.quota_for("x=y") == 3  # the last "=" splits
        assert registry.quota_for("ip:192.0.2.1") == 2
        for request_id in range(4):  # past the quota: recorded (shadow), not refused
            await registry.cancel(request_id, None, "ip:192.0.2.1")
        assert (await registry.stats()).rows == {"ip:192.0.2.1": 4}
    finally:
        await registry.aclose()


def test_a_malformed_quota_override_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["demo", "--quota-override", "principal:batch"])
    assert args.run(args) == 2
    assert "expected SCOPE=N" in capsys.readouterr().err


def test_bad_trusted_proxy_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["demo", "--trusted-proxy", "nope"])
    assert args.run(args) == 2
    assert "invalid trusted proxy" in capsys.readouterr().err


def test_instructions_name_the_endpoint_and_both_ways_to_cancel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MCP_CANCELLATION_CLIENT_COMMAND", raising=False)
    text = _instructions("0.0.0.0", 8123, False)
    assert "http://127.0.0.1:8123/mcp" in text
    assert "notifications/cancelled" in text
    assert "Ctrl-C" in text
    assert "http://127.0.0.1:8123/metrics" in text
    # The client command runs as printed: this interpreter, which has the package.
    assert f"{sys.executable} -m mcp_cancellation client --url http://127.0.0.1:8123/mcp" in text


def test_instructions_advertise_metrics_only_when_served() -> None:
    text = _instructions("127.0.0.1", 8123, False, metrics=False)
    assert "http://127.0.0.1:8123/metrics" not in text
    assert "pip install 'mcp-cancellation[prometheus]'" in text


def test_dev_demo_prints_its_own_client_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_CANCELLATION_CLIENT_COMMAND", "./dev client")
    assert client_command("http://127.0.0.1:8000/mcp") == (
        "./dev client --url http://127.0.0.1:8000/mcp"
    )


def test_the_printed_client_command_cancels_three_ways(
    json_response: bool, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    """``mcp-cancellation client`` against the demo, in both response modes: each of its
    three calls is cancelled and stops, and the server logs one line for each."""
    registry = CancellationRegistry(MemoryStorage(), janitor_interval=None)
    app = build_demo_app(registry, json_response=json_response, poll_interval=0.02)
    with (
        caplog.at_level(logging.INFO, logger="mcp_cancellation"),
        UvicornThread(app, proxy_headers=False) as server,
    ):
        assert command_main(["client", "--url", server.url + "/mcp", "--after", "0.5"]) == 0
        # One line per cancelled call, written when its handler ended.
        wait_until(lambda: len(_cancellation_lines(caplog)) >= 3, timeout=10)
    out = capsys.readouterr().out
    assert "tools/call answered error {'code': -32800" in out
    assert "notifications/cancelled answered HTTP 202" in out
    lines = _cancellation_lines(caplog)
    assert len(lines) == 3, lines
    assert all("(scope kind ip, " in line and ": stopped " in line for line in lines), lines
    assert (
        "cancelled request 'demo-1' (scope kind ip, reason 'mcp-cancellation client" in (lines[0])
    )


async def test_the_client_leaves_only_after_the_cancelled_calls_late_answer(
    json_response: bool, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    """The mcp client fails its own shutdown if an answer reaches its session as the
    session closes, so ``client`` closes only once the answers still owed have come: here
    the tool notices the cancellation about 0.7 s after it was sent, well after the
    client's next round trip, and its late ``-32800`` has reached the client's session
    (which drops it: nobody waits for it any more) by the time ``with_client`` returns."""
    registry = CancellationRegistry(MemoryStorage(), janitor_interval=None)
    # The tool checks for a cancellation once a second: the call cancelled at 0.3 s
    # answers at about 1 s.
    app = build_demo_app(registry, json_response=json_response, poll_interval=1.0)
    with (
        caplog.at_level(logging.DEBUG, logger="mcp.shared.jsonrpc_dispatcher"),
        UvicornThread(app, proxy_headers=False) as server,
    ):
        assert await with_client(server.url + "/mcp", 0.3, LEGACY)
        late = [
            r
            for r in caplog.records
            if r.getMessage().startswith("dropping response")
            and r.thread == threading.get_ident()  # the client's, not the server's thread
        ]
    assert late, "the client closed before the cancelled call's answer came"
    assert "the client POSTed notifications/cancelled" in capsys.readouterr().out


def _cancellation_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.getMessage().startswith("cancelled request")
    ]


async def test_printed_recipe_cancels_slow_count(
    json_response: bool, caplog: pytest.LogCaptureFixture
) -> None:
    registry = CancellationRegistry(MemoryStorage(), janitor_interval=None)
    app = build_demo_app(registry, json_response=json_response, poll_interval=0.02)
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "slow_count",
            "arguments": {"seconds": 30},
            "_meta": {"progressToken": 1},
        },
    }
    answers: list[httpx.Response] = []
    with (
        caplog.at_level(logging.INFO, logger="mcp_cancellation"),
        UvicornThread(app, proxy_headers=False) as server,
    ):
        url = server.url + "/mcp"
        async with httpx.AsyncClient(timeout=30) as http:

            async def start() -> None:
                answers.append(await http.post(url, json=call, headers=SSE_AND_JSON))

            async with anyio.create_task_group() as tg:
                tg.start_soon(start)
                await async_wait_until(
                    lambda: stats_now(registry).total_in_flight == 1,
                )
                cancel = await http.post(
                    url, json=cancel_body(1, "changed my mind"), headers=SSE_AND_JSON
                )
                assert cancel.status_code == 202
            metrics = await http.get(server.url + "/metrics")
            async with Client(url, mode="legacy") as client:
                whoami = await client.call_tool("whoami", {})
                echo = await client.call_tool("echo", {"text": "hello"})
    answer = final_message(answers[0])
    assert answer["error"]["code"] == -32800
    assert answer["error"]["data"] == {"reason": "changed my mind"}
    others = [m for m in jsonrpc_messages(answers[0]) if "id" not in m]
    assert all(m["method"] == "notifications/progress" for m in others)
    # One log line for the cancellation, once the call's handler ended.
    await async_wait_until(lambda: len(_cancellation_lines(caplog)) == 1)
    (line,) = _cancellation_lines(caplog)
    assert line.startswith(
        "cancelled request '1' (scope kind ip, reason 'changed my mind', "
        f"worker {registry.instance_id} pid {os.getpid()}): stopped "
    ), line
    assert metrics.status_code == 200
    assert 'mcp_cancellation_cancelled_total{scope_kind="ip"} 1.0' in metrics.text
    assert _text(whoami) == "ip:127.0.0.1"
    assert _text(echo) == "hello"

    # Answers can arrive before their handlers released their rows: wait for the release.
    def empty() -> bool:
        final = stats_now(registry)
        return bool(final.total_rows == 0 and final.total_in_flight == 0)

    await async_wait_until(empty, within=10)


def _text(result: Any) -> str:
    text: str = result.content[0].text
    return text


@pytest.mark.parametrize("json_response", [True, False], ids=["json", "sse"])
def test_the_banner_s_task_commands_run_as_printed(json_response: bool) -> None:
    """Step 4 of the banner, run by bash as printed: curl creates the task, polls it and
    cancels it (the demo serves slow_count as a task)."""
    registry = CancellationRegistry(MemoryStorage(), janitor_interval=None)
    app = build_demo_app(registry, json_response=json_response, poll_interval=0.02)
    with UvicornThread(app, proxy_headers=False) as server:
        port = int(server.url.rsplit(":", 1)[1])
        text = _instructions("127.0.0.1", port, json_response)
        step = text.split("4. Or run it as a task", 1)[1].split("Or let the Python client", 1)[0]
        lines = step.splitlines()
        commands = [
            line.strip() + "\n" + lines[i + 1].strip()
            for i, line in enumerate(lines)
            if line.strip().startswith("curl ")
        ]
        assert len(commands) == 3, step
        assert "TASK=<the taskId>" in step
        create, get, cancel = commands

        def run(command: str, task: str = "") -> dict[str, Any]:
            done = subprocess.run(
                ["bash", "-c", command],
                capture_output=True,
                text=True,
                timeout=30,
                env={**os.environ, "TASK": task},
                check=True,
            )
            out = done.stdout.strip()
            if out.startswith("event:") or "data:" in out:  # an SSE answer: its data line
                out = next(x[5:].strip() for x in out.splitlines() if x.startswith("data:"))
            answer: dict[str, Any] = json.loads(out)
            return answer

        created = run(create)["result"]
        assert created["resultType"] == "task"
        task = created["taskId"]
        assert run(get, task)["result"]["status"] == "working"
        assert run(cancel, task)["result"]["resultType"] == "complete"
        wait_until(lambda: run(get, task)["result"]["status"] == "cancelled", timeout=10)
