"""The demo server: what its printed instructions tell a user to do works."""

from __future__ import annotations

import logging
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client

from mcp_cancellation import CancellationRegistry, MemoryStorage
from mcp_cancellation import signals as sig
from mcp_cancellation.__main__ import build_parser
from mcp_cancellation.demo import _instructions, _log_cancellation, build_demo_app

from ..support import UvicornThread, async_wait_until
from .conftest import SSE_AND_JSON, cancel_body, final_message, jsonrpc_messages

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


def test_bad_trusted_proxy_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["demo", "--trusted-proxy", "nope"])
    assert args.run(args) == 2
    assert "invalid trusted proxy" in capsys.readouterr().err


def test_instructions_name_the_endpoint_and_both_ways_to_cancel() -> None:
    text = _instructions("0.0.0.0", 8123, False)
    assert "http://127.0.0.1:8123/mcp" in text
    assert "notifications/cancelled" in text
    assert "Ctrl-C" in text
    assert "examples/client_cancel.py" in text


@pytest.mark.parametrize(
    "json_response", [pytest.param(False, id="sse"), pytest.param(True, id="json")]
)
async def test_printed_recipe_cancels_slow_count(
    json_response: bool, caplog: pytest.LogCaptureFixture
) -> None:
    registry = CancellationRegistry(MemoryStorage(), janitor_interval=None)
    app = build_demo_app(registry, json_response=json_response, poll_interval=0.02)
    sig.request_cancelled.connect(_log_cancellation, sender=registry, weak=False)
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
    try:
        with (
            caplog.at_level(logging.INFO, logger="mcp_cancellation.demo"),
            UvicornThread(app, proxy_headers=False) as server,
        ):
            url = server.url + "/mcp"
            async with httpx.AsyncClient(timeout=30) as http:

                async def start() -> None:
                    answers.append(await http.post(url, json=call, headers=SSE_AND_JSON))

                async with anyio.create_task_group() as tg:
                    tg.start_soon(start)
                    await async_wait_until(
                        lambda: registry.storage.stats_nowait().total_in_flight == 1,  # type: ignore[attr-defined]
                    )
                    cancel = await http.post(
                        url, json=cancel_body(1, "changed my mind"), headers=SSE_AND_JSON
                    )
                    assert cancel.status_code == 202
                metrics = await http.get(server.url + "/metrics")
                async with Client(url, mode="legacy") as client:
                    whoami = await client.call_tool("whoami", {})
                    echo = await client.call_tool("echo", {"text": "hello"})
    finally:
        sig.request_cancelled.disconnect(_log_cancellation, sender=registry)
    answer = final_message(answers[0])
    assert answer["error"]["code"] == -32800
    assert answer["error"]["data"] == {"reason": "changed my mind"}
    others = [m for m in jsonrpc_messages(answers[0]) if "id" not in m]
    assert all(m["method"] == "notifications/progress" for m in others)
    assert "cancelled request 1 in scope ip:127.0.0.1 (via notifications/cancelled)" in caplog.text
    assert metrics.status_code == 200
    assert 'mcp_cancellation_cancelled_total{scope_kind="ip"} 1.0' in metrics.text
    assert _text(whoami) == "ip:127.0.0.1"
    assert _text(echo) == "hello"
    final = registry.storage.stats_nowait()  # type: ignore[attr-defined]
    assert final.total_rows == 0
    assert final.total_in_flight == 0


def _text(result: Any) -> str:
    text: str = result.content[0].text
    return text
