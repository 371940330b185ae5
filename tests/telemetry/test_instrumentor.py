"""Zero-code instrumentation: ``opentelemetry-instrument`` finds the instrumentor through
its entry point and records every registry; a registry with its own bridge is recorded
once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mcp_cancellation import CancellationRegistry
from mcp_cancellation.telemetry import otel
from mcp_cancellation.telemetry._instrumentation import McpCancellationInstrumentor
from mcp_cancellation.telemetry.otel import _names as otel_names

from ._util import events, points

SCRIPT = textwrap.dedent(
    """
    import asyncio
    from opentelemetry import trace
    from mcp_cancellation import CancellationRegistry, InvalidRequestId

    async def main():
        registry = CancellationRegistry(janitor_interval=None)
        with trace.get_tracer("program").start_as_current_span("job"):
            await registry.cancel(7, "stop", "ip:192.0.2.1")
        try:
            await registry.cancel(True, None, "ip:192.0.2.1")
        except InvalidRequestId:
            pass

    asyncio.run(main())
    """
)


def test_the_entry_point_names_the_instrumentor() -> None:
    (found,) = [
        e for e in entry_points(group="opentelemetry_instrumentor") if e.name == "mcp_cancellation"
    ]
    assert found.load() is McpCancellationInstrumentor


def test_opentelemetry_instrument_records_a_plain_program(tmp_path: Path) -> None:
    script = tmp_path / "program.py"
    script.write_text(SCRIPT, encoding="utf-8")
    launcher = Path(sys.executable).with_name("opentelemetry-instrument")
    environment = {
        **os.environ,
        "OTEL_SERVICE_NAME": "instrumented-program",
        "OTEL_TRACES_EXPORTER": "console",
        "OTEL_METRICS_EXPORTER": "console",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "",
    }
    done = subprocess.run(
        [str(launcher), sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        env=environment,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    decoder = json.JSONDecoder()
    documents: list[Any] = []
    text = done.stdout
    index = 0
    while (start := text.find("{", index)) != -1:
        document, index = decoder.raw_decode(text, start)
        documents.append(document)
    spans = [d for d in documents if "context" in d and "name" in d]
    (job,) = [s for s in spans if s["name"] == "job"]
    (cancel,) = [e for e in job["events"] if e["name"] == otel_names.EVENT_CANCEL]
    assert cancel["attributes"]["mcp_cancellation.request.id"] == "7"
    metric_names = {
        metric["name"]
        for d in documents
        for resource in d.get("resource_metrics", [])
        for scope in resource["scope_metrics"]
        for metric in scope["metrics"]
    }
    assert {"mcp_cancellation.cancelled", "mcp_cancellation.rejected"} <= metric_names


async def test_a_registry_with_its_own_bridge_is_recorded_once(
    span_exporter: InMemorySpanExporter,
    tracer_provider: TracerProvider,
    meter_provider: MeterProvider,
    metric_reader: InMemoryMetricReader,
) -> None:
    instrumentor = McpCancellationInstrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)
    own = CancellationRegistry(janitor_interval=None)
    plain = CancellationRegistry(janitor_interval=None)
    try:
        otel.instrument(own, tracer_provider=tracer_provider, meter_provider=meter_provider)
        with tracer_provider.get_tracer("server").start_as_current_span("request"):
            await own.cancel(1, None, "ip:192.0.2.1")
            await plain.cancel(1, None, "ip:192.0.2.2")
        assert len(events(span_exporter.get_finished_spans(), otel_names.EVENT_CANCEL)) == 2
        assert points(metric_reader, "mcp_cancellation.cancelled") == {
            frozenset({("scope_kind", "ip")}): 2
        }
    finally:
        otel.uninstrument(own)
        instrumentor.uninstrument()
        await own.aclose()
        await plain.aclose()
    assert not otel.instrumented()
