"""OTLP/HTTP end to end: the SDK's OTLP exporters push the bridge's spans and metrics to a
loopback OTLP/HTTP receiver, which decodes the protobuf; the documented names arrive."""

from __future__ import annotations

import asyncio

import pytest
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from mcp_cancellation import CancellationLimitReached, CancellationRegistry, signals
from mcp_cancellation.telemetry import otel
from mcp_cancellation.telemetry.otel import _names as otel_names

from ..support import async_wait_until, wait_until
from ._otlp import Receiver


async def test_spans_and_metrics_arrive_over_otlp_http(receiver: Receiver) -> None:
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{receiver.url}/v1/traces"))
    )
    reader = PeriodicExportingMetricReader(
        OTLPMetricExporter(endpoint=f"{receiver.url}/v1/metrics"), export_interval_millis=3_600_000
    )
    meter_provider = MeterProvider(metric_readers=[reader])
    registry = CancellationRegistry(
        max_rows=3, max_rows_per_scope=2, janitor_interval=None, cancel_grace=0.05
    )
    otel.instrument(registry, tracer_provider=tracer_provider, meter_provider=meter_provider)
    server = tracer_provider.get_tracer("server")
    try:
        with server.start_as_current_span("POST /mcp"):  # as a server's request span
            await registry.cancel(1, "stop", "ip:192.0.2.1")
            await registry.cancel(2, None, "ip:192.0.2.1")
            with pytest.raises(CancellationLimitReached):
                await registry.cancel(3, None, "ip:192.0.2.1")
            await registry.cancel(1, None, "principal:alice")
            await registry.cancel(2, None, "principal:alice")  # evicts
            # A request that runs past cancel_grace after its cancellation, then ends.
            async with registry.request(7, "ip:192.0.2.9", tool="stubborn") as token:
                await registry.cancel_in_flight(7, None, "ip:192.0.2.9")
                await async_wait_until(lambda: token in registry.ignoring(), within=10)
            # A task created in this request (as TasksExtension reports one).
            signals.task_created.send(registry, task_id="t1", scope="ip:192.0.2.9", tool="slow")
        # ... whose work ends later: its span links to the request that created it.
        signals.task_ended.send(
            registry,
            task_id="t1",
            scope="ip:192.0.2.9",
            tool="slow",
            status="completed",
            seconds=2.0,
        )
        # A pass that removes only a dead owner's in-flight row (the table keeps its
        # cancellation rows; a pass that removes nothing exports no span).
        await asyncio.create_task(registry.track(9, "ip:192.0.2.50"))
        assert await registry.cleanup() == (0, 1)
        # A cancellation the middleware took outside any server span gets a span.
        await registry.cancel(5, None, "ip:192.0.2.60", method="notifications/cancelled")
        assert tracer_provider.force_flush()
        assert meter_provider.force_flush()
        wait_until(lambda: receiver.traces and receiver.metrics, timeout=20)
    finally:
        otel.uninstrument(registry)
        tracer_provider.shutdown()
        meter_provider.shutdown()
        await registry.aclose()

    assert receiver.span_names() >= otel_names.SPAN_NAMES
    assert receiver.event_names()["POST /mcp"] == {
        otel_names.EVENT_CANCEL,
        otel_names.EVENT_EVICT,
        otel_names.EVENT_REJECTED,
    }
    points = receiver.metric_points()
    # Every instrument arrived, each point with exactly the catalogue's labels.
    for name, (_, _, labels) in otel_names.METER_INSTRUMENTS.items():
        assert points.get(name) == {frozenset(labels)}, (name, points.get(name))
