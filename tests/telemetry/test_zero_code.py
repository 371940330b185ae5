"""Zero-code OpenTelemetry sees every cancel: the demo server run under the real
``opentelemetry-instrument`` command, exporting over OTLP/HTTP to a loopback receiver, and
cancelled three ways by the real client (a second request, the mcp client's notification,
a closed stream). The middleware answers those itself, outside any server span, so each
leaves a span of its own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from mcp_cancellation.telemetry.otel import _names as otel_names

from ..jsonrpc import MODERN, versioned_call
from ..processes import DemoProcess
from ..support import wait_until
from ._otlp import Receiver

pytestmark = pytest.mark.e2e


class InstrumentedDemo(DemoProcess):
    """``opentelemetry-instrument python -m mcp_cancellation demo``."""

    def start(self) -> None:
        launcher = str(Path(sys.executable).with_name("opentelemetry-instrument"))
        command = [launcher, sys.executable, "-m", "mcp_cancellation", "demo"]
        self._launch(
            lambda port: [*command, "--host", "127.0.0.1", "--port", str(port), *self.args],
            "/metrics",
            self.server_log,
        )


def cancel_spans(receiver: Receiver) -> list[dict[str, str]]:
    return [
        {a.key: a.value.string_value for a in span.attributes}
        for request in receiver.traces
        for resource in request.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
        if span.name == otel_names.SPAN_CANCEL
    ]


def export_traces_to(receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``OTEL_*`` variables of an instrumented demo that sends its traces, at once,
    over OTLP/HTTP to *receiver*."""
    for name, value in {
        "OTEL_SERVICE_NAME": "mcp-demo",
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }.items():
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize("mode", [(), ("--json-response",)], ids=["sse", "json"])
def test_every_cancel_leaves_a_span_under_opentelemetry_instrument(
    receiver: Receiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: tuple[str, ...]
) -> None:
    export_traces_to(receiver, monkeypatch)
    with InstrumentedDemo(*mode, log=tmp_path / "demo.log") as demo:
        client = subprocess.run(
            [sys.executable, "-m", "mcp_cancellation", "client", "--url", demo.url + "/mcp"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert client.returncode == 0, client.stdout + client.stderr

        def three() -> bool:
            return len(cancel_spans(receiver)) >= 3

        wait_until(three, timeout=20)
    sources = sorted(span["mcp_cancellation.source"] for span in cancel_spans(receiver))
    assert sources == ["disconnect", "notification", "notification"]
    assert all(span["mcp_cancellation.scope_kind"] == "ip" for span in cancel_spans(receiver))


def test_a_closed_sse_stream_is_a_cancel_span_under_opentelemetry_instrument(
    receiver: Receiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A raw client that reads the call's SSE stream (a progress event), then hangs up:
    the cancellation is a span. (Where an ASGI instrumentation's span is current as the
    app notices the hang-up, the span is its child: tests/telemetry/test_otel.py.)"""
    export_traces_to(receiver, monkeypatch)
    body, headers = versioned_call(MODERN, "hang-up", "slow_count", {"seconds": 30})
    body["params"]["_meta"]["progressToken"] = 1
    with InstrumentedDemo(log=tmp_path / "demo.log") as demo:
        with (
            httpx.Client(timeout=20) as client,
            client.stream("POST", demo.url + "/mcp", json=body, headers=headers) as answer,
        ):
            assert answer.headers["content-type"].startswith("text/event-stream")
            for line in answer.iter_lines():
                if line.startswith("data:") and "notifications/progress" in line:
                    break  # the tool runs and the stream is open: hang up

        def disconnect_span() -> bool:
            return any(s["mcp_cancellation.source"] == "disconnect" for s in cancel_spans(receiver))

        wait_until(disconnect_span, timeout=20)
