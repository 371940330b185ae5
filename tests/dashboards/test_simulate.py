"""``mcp-cancellation simulate``: loopback only, bounded, and the traffic it claims to send."""

from __future__ import annotations

import argparse
import io
import ipaddress
import json
import signal
import time
from types import FrameType

import httpx
import pytest

from mcp_cancellation import CancellationRegistry
from mcp_cancellation.__main__ import build_parser
from mcp_cancellation._demo import build_demo_app
from mcp_cancellation.simulate import SimulationConfig, SimulationStats, simulate
from mcp_cancellation.simulate._command import _ProgressBar, run
from mcp_cancellation.simulate._traffic import _address_pool, _parse_messages

from ..support import UvicornThread


@pytest.mark.parametrize(
    "url", ["http://example.com/mcp", "http://10.0.0.1:8000/mcp", "http://[2001:db8::1]/mcp"]
)
def test_refuses_non_loopback_urls(url: str) -> None:
    with pytest.raises(ValueError, match="non-loopback"):
        SimulationConfig(url=url)


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8000/mcp", "http://localhost:8000/mcp", "http://[::1]:8000/mcp"]
)
def test_accepts_loopback_urls(url: str) -> None:
    assert SimulationConfig(url=url).url == url


@pytest.mark.parametrize(
    "change", [{"duration": 0}, {"duration": 7200}, {"max_requests": 0}, {"cancel_share": 2}]
)
def test_bounds_are_enforced(change: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must"):
        SimulationConfig(url="http://127.0.0.1/mcp", **change)  # type: ignore[arg-type]


def test_command_line_rejects_a_remote_url(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["simulate", "--url", "http://192.0.2.1/mcp"])
    assert args.run(args) == 2
    assert "non-loopback" in capsys.readouterr().err


def test_flood_addresses_are_distinct_documentation_addresses() -> None:
    pool = _address_pool(1000)
    assert len(set(pool)) == 1000
    documentation = [
        ipaddress.ip_network(n) for n in ("198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32")
    ]
    for address in pool:
        parsed = ipaddress.ip_address(address)
        assert any(parsed in network for network in documentation), address


def test_parses_json_and_sse_answers() -> None:
    message = {"jsonrpc": "2.0", "id": 3, "error": {"code": -32800, "message": "Request cancelled"}}
    body = json.dumps(message).encode()
    json_response = httpx.Response(200, headers={"content-type": "application/json"})
    assert _parse_messages(json_response, body) == [message]
    sse = (
        b"event: message\r\ndata: "
        + json.dumps({"jsonrpc": "2.0", "method": "notifications/progress"}).encode()
        + b"\r\n\r\nevent: message\r\ndata: "
        + body
        + b"\r\n\r\n"
    )
    sse_response = httpx.Response(200, headers={"content-type": "text/event-stream"})
    assert _parse_messages(sse_response, sse)[-1] == message
    assert _parse_messages(json_response, b"") == []
    assert _parse_messages(json_response, b"not json") == []


def test_progress_bar_draws_on_a_terminal() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Terminal()
    bar = _ProgressBar(stream, width=10)
    bar(SimulationStats(calls_started=3, elapsed=1.0), 0.5)
    bar(SimulationStats(calls_started=7, elapsed=2.0), 1.0)
    text = stream.getvalue()
    assert "\r[#####-----]" in text
    assert "[##########]" in text
    assert text.endswith("\n")
    quiet = io.StringIO()
    _ProgressBar(quiet)(SimulationStats(), 0.5)
    assert quiet.getvalue() == ""


@pytest.fixture
def demo() -> UvicornThread:
    registry = CancellationRegistry(max_rows=100, max_rows_per_scope=4, janitor_interval=None)
    app = build_demo_app(registry, trusted_proxies=["127.0.0.1"])
    return UvicornThread(app)


@pytest.mark.e2e
async def test_traffic_against_the_demo(demo: UvicornThread) -> None:
    """Clients cancel their own calls, hogs are refused past the quota, the flood is
    ignored; the hogs size themselves from the quota in /metrics."""
    with demo:
        config = SimulationConfig(
            url=f"{demo.url}/mcp", duration=4, clients=2, flood_rate=50, hogs=1, seed=1
        )
        stats = await simulate(config)
    assert stats.hog_calls == 4 + 2 + 2  # quota 4 and a half, plus 2
    assert stats.transport_errors == 0
    assert stats.http_errors == 0
    assert stats.calls_cancelled > 0
    assert stats.quota_rejected > 0
    assert stats.flood_sent > 0
    assert stats.flood_ignored + stats.invalid_rejected == stats.flood_sent


@pytest.mark.e2e
async def test_request_budget_stops_the_run(demo: UvicornThread) -> None:
    with demo:
        config = SimulationConfig(url=f"{demo.url}/mcp", duration=60, max_requests=40, hogs=0)
        began = time.monotonic()
        stats = await simulate(config)
    assert stats.requests == 40
    assert time.monotonic() - began < 60


@pytest.mark.e2e
def test_command_line_prints_json(demo: UvicornThread, capsys: pytest.CaptureFixture[str]) -> None:
    with demo:
        args = build_parser().parse_args(
            ["simulate", "--url", f"{demo.url}/mcp", "--duration", "2", "--hogs", "0", "--json"]
        )
        assert isinstance(args, argparse.Namespace)
        assert run(args) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["calls_started"] > 0
    assert stats["requests"] >= stats["calls_started"] + stats["cancels_sent"]


@pytest.mark.e2e
def test_command_line_puts_the_signal_handlers_back(
    demo: UvicornThread, capsys: pytest.CaptureFixture[str]
) -> None:
    """``run()`` stops early on SIGINT or SIGTERM while it runs, and then leaves the
    process's own handlers in place (asyncio alone would leave SIGTERM at its default)."""

    def ours(signum: int, frame: FrameType | None) -> None:
        raise AssertionError("not expected to run")

    sigint = signal.getsignal(signal.SIGINT)
    sigterm = signal.signal(signal.SIGTERM, ours)
    try:
        with demo:
            url = f"{demo.url}/mcp"
            args = build_parser().parse_args(
                ["simulate", "--url", url, "--max-requests", "5", "--hogs", "0", "--json"]
            )
            assert isinstance(args, argparse.Namespace)
            assert run(args) == 0
        assert json.loads(capsys.readouterr().out)["requests"] == 5
        assert signal.getsignal(signal.SIGTERM) is ours
        assert signal.getsignal(signal.SIGINT) is sigint
    finally:
        signal.signal(signal.SIGTERM, sigterm)
