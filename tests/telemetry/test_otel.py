"""The OpenTelemetry bridge: spans, parents, attributes and meter points (injected providers)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from mcp_cancellation import (
    CancellationLimitReached,
    CancellationRegistry,
    InvalidRequestId,
    __version__,
    signals,
)
from mcp_cancellation.telemetry import otel
from mcp_cancellation.telemetry._labels import ScopeLabeler

from ._util import SESSION_ID

SESSION = f"session:{SESSION_ID}"


def by_name(spans: Iterable[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]


def points(reader: InMemoryMetricReader, name: str) -> dict[frozenset[Any], float]:
    """Sum data points of one instrument, by attribute set."""
    data = reader.get_metrics_data()
    out: dict[frozenset[Any], float] = {}
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            assert scope.scope.name == otel.INSTRUMENTATION_NAME
            assert scope.scope.version == __version__
            for metric in scope.metrics:
                if metric.name == name:
                    for point in metric.data.data_points:
                        assert isinstance(point, NumberDataPoint)
                        out[frozenset((point.attributes or {}).items())] = point.value
    return out


@pytest.fixture
def instrumented(
    tracer_provider: TracerProvider, meter_provider: MeterProvider
) -> otel.OpenTelemetryBridge:
    return otel.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)


async def test_cancel_span_is_a_child_of_the_current_span(
    make_memory_registry: Any,
    tracer_provider: TracerProvider,
    span_exporter: InMemorySpanExporter,
    instrumented: otel.OpenTelemetryBridge,
) -> None:
    registry: CancellationRegistry = make_memory_registry()
    request_tracer = tracer_provider.get_tracer("mcp-python-sdk")
    with request_tracer.start_as_current_span("notifications/cancelled") as parent:
        await registry.cancel(42, "user pressed stop", SESSION, method="notifications/cancelled")
    (span,) = by_name(span_exporter.get_finished_spans(), otel.SPAN_CANCEL)
    assert span.parent is not None
    assert span.parent.span_id == parent.get_span_context().span_id
    assert span.context.trace_id == parent.get_span_context().trace_id
    assert span.instrumentation_scope is not None
    assert span.instrumentation_scope.name == "mcp_cancellation"
    assert span.instrumentation_scope.version == __version__
    assert dict(span.attributes or {}) == {
        "jsonrpc.request.id": "42",
        "mcp.method.name": "notifications/cancelled",
        "mcp.cancellation.source": "notification",
        "mcp.cancellation.scope_kind": "session",
        "mcp.cancellation.scope": ScopeLabeler()(SESSION),
        "mcp.cancellation.reason": "user pressed stop",
    }


async def test_disconnect_and_library_cancellations(
    make_memory_registry: Any,
    span_exporter: InMemorySpanExporter,
    metric_reader: InMemoryMetricReader,
    instrumented: otel.OpenTelemetryBridge,
) -> None:
    registry: CancellationRegistry = make_memory_registry()
    await registry.cancel("abc", None, "ip:192.0.2.1", method="disconnect")
    await registry.cancel(7)
    disconnect, library = by_name(span_exporter.get_finished_spans(), otel.SPAN_CANCEL)
    assert disconnect.parent is None  # no current span: a root span
    assert dict(disconnect.attributes or {}) == {
        "jsonrpc.request.id": "abc",
        "mcp.cancellation.source": "disconnect",
        "mcp.cancellation.scope_kind": "ip",
        "mcp.cancellation.scope": "ip:192.0.2.1",
    }
    assert dict(library.attributes or {}) == {
        "jsonrpc.request.id": "7",
        "mcp.cancellation.source": "api",
        "mcp.cancellation.scope_kind": "global",
        "mcp.cancellation.scope": "global",
    }
    assert points(metric_reader, "mcp.cancellation.cancelled") == {
        frozenset(
            {("mcp.cancellation.scope_kind", "ip"), ("mcp.cancellation.source", "disconnect")}
        ): 1,
        frozenset(
            {("mcp.cancellation.scope_kind", "global"), ("mcp.cancellation.source", "api")}
        ): 1,
    }


async def test_cleanup_span_spans_the_pass(
    make_memory_registry: Any,
    span_exporter: InMemorySpanExporter,
    metric_reader: InMemoryMetricReader,
    instrumented: otel.OpenTelemetryBridge,
) -> None:
    registry: CancellationRegistry = make_memory_registry()
    for request_id in range(3):
        await registry.cancel(request_id, None, "ip:192.0.2.1")
    await asyncio.create_task(registry.track(9, "ip:192.0.2.1"))  # owner ends, row stays
    sent: list[dict[str, Any]] = []

    def capture(sender: object, **kwargs: Any) -> None:
        sent.append(kwargs)

    with signals.cancellation_cleanup.connected_to(capture, sender=registry):
        assert await registry.cleanup(ttl=1e-9) == (3, 1)
    (span,) = by_name(span_exporter.get_finished_spans(), otel.SPAN_CLEANUP)
    (signal,) = sent
    assert span.start_time == signal["start_time_ns"]
    assert span.end_time == signal["start_time_ns"] + round(signal["duration"] * 1e9)
    assert dict(span.attributes or {}) == {
        "mcp.cancellation.removed": 3,
        "mcp.cancellation.in_flight_removed": 1,
    }
    assert points(metric_reader, "mcp.cancellation.cleanup.removed") == {
        frozenset({("mcp.cancellation.table", "cancellations")}): 3,
        frozenset({("mcp.cancellation.table", "in_flight")}): 1,
    }


async def test_evictions_and_rejections(
    make_memory_registry: Any,
    span_exporter: InMemorySpanExporter,
    metric_reader: InMemoryMetricReader,
    instrumented: otel.OpenTelemetryBridge,
) -> None:
    registry: CancellationRegistry = make_memory_registry(max_rows=2, max_rows_per_scope=2)
    await registry.cancel(1, None, SESSION)
    await registry.cancel(2, None, SESSION)
    with pytest.raises(CancellationLimitReached):
        await registry.cancel(3, None, SESSION)
    with pytest.raises(InvalidRequestId):
        await registry.cancel(2.5, None, "principal:carol")
    await registry.cancel(1, None, "principal:carol")  # cap reached: evicts one session row
    spans = span_exporter.get_finished_spans()
    quota, invalid = by_name(spans, otel.SPAN_REJECT)
    assert quota.status.status_code is StatusCode.ERROR
    assert dict(quota.attributes or {}) == {
        "mcp.cancellation.scope_kind": "session",
        "mcp.cancellation.scope": ScopeLabeler()(SESSION),
        "mcp.cancellation.rejection.reason": "quota",
        "jsonrpc.request.id": "3",
    }
    assert dict(invalid.attributes or {}) == {
        "mcp.cancellation.scope_kind": "principal",
        "mcp.cancellation.scope": "principal:carol",
        "mcp.cancellation.rejection.reason": "invalid_request_id",
    }
    (evict,) = by_name(spans, otel.SPAN_EVICT)
    assert dict(evict.attributes or {}) == {
        "mcp.cancellation.scope_kind": "session",
        "mcp.cancellation.scope": ScopeLabeler()(SESSION),
        "mcp.cancellation.evicted": 1,
    }
    assert points(metric_reader, "mcp.cancellation.evicted") == {
        frozenset({("mcp.cancellation.scope_kind", "session")}): 1
    }
    assert points(metric_reader, "mcp.cancellation.rejected") == {
        frozenset(
            {
                ("mcp.cancellation.scope_kind", "session"),
                ("mcp.cancellation.rejection.reason", "quota"),
            }
        ): 1,
        frozenset(
            {
                ("mcp.cancellation.scope_kind", "principal"),
                ("mcp.cancellation.rejection.reason", "invalid_request_id"),
            }
        ): 1,
    }
    for span in spans:  # the session id is never exported
        assert span.name in otel.SPAN_NAMES
        assert set(span.attributes or {}) <= otel.ATTRIBUTES
        assert all(SESSION_ID not in str(v) for v in (span.attributes or {}).values())


async def test_instrument_is_idempotent_and_uninstrument_stops(
    make_memory_registry: Any,
    tracer_provider: TracerProvider,
    meter_provider: MeterProvider,
    span_exporter: InMemorySpanExporter,
) -> None:
    registry: CancellationRegistry = make_memory_registry()
    before = len(signals.request_cancelled.receivers)
    first = otel.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)
    assert otel.instrument(tracer_provider=tracer_provider) is first
    assert otel.instrumented()
    await registry.cancel(1)
    assert len(by_name(span_exporter.get_finished_spans(), otel.SPAN_CANCEL)) == 1
    otel.uninstrument()
    otel.uninstrument()
    assert not otel.instrumented()
    assert len(signals.request_cancelled.receivers) == before
    await registry.cancel(2)
    assert len(by_name(span_exporter.get_finished_spans(), otel.SPAN_CANCEL)) == 1
    with pytest.raises(TypeError):
        otel.instrument(tracer_provider)  # type: ignore[arg-type]


async def test_instrument_one_registry_only(
    make_memory_registry: Any,
    tracer_provider: TracerProvider,
    meter_provider: MeterProvider,
    span_exporter: InMemorySpanExporter,
) -> None:
    watched: CancellationRegistry = make_memory_registry()
    other: CancellationRegistry = make_memory_registry()
    bridge = otel.instrument(
        watched, tracer_provider=tracer_provider, meter_provider=meter_provider
    )
    assert otel.instrument(watched) is bridge
    assert otel.instrumented(watched)
    assert not otel.instrumented(other)
    await watched.cancel(1)
    await other.cancel(2)
    (span,) = by_name(span_exporter.get_finished_spans(), otel.SPAN_CANCEL)
    assert (span.attributes or {})["jsonrpc.request.id"] == "1"
    otel.uninstrument(watched)
    assert not otel.instrumented(watched)
    await watched.cancel(3)
    assert len(span_exporter.get_finished_spans()) == 1


async def test_hash_key_applies_to_span_attributes(
    make_memory_registry: Any,
    tracer_provider: TracerProvider,
    meter_provider: MeterProvider,
    span_exporter: InMemorySpanExporter,
) -> None:
    registry: CancellationRegistry = make_memory_registry()
    otel.instrument(
        registry, tracer_provider=tracer_provider, meter_provider=meter_provider, hash_key="k"
    )
    await registry.cancel(1, None, SESSION)
    (span,) = span_exporter.get_finished_spans()
    scope = (span.attributes or {})["mcp.cancellation.scope"]
    assert scope == ScopeLabeler("k")(SESSION) != ScopeLabeler()(SESSION)


class _BrokenTracer:
    def start_span(self, *args: object, **kwargs: object) -> Any:
        raise RuntimeError("exporter exploded")


async def test_a_failing_receiver_never_breaks_cancel(
    make_memory_registry: Any,
    tracer_provider: TracerProvider,
    meter_provider: MeterProvider,
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry: CancellationRegistry = make_memory_registry()
    bridge = otel.instrument(
        registry, tracer_provider=tracer_provider, meter_provider=meter_provider
    )
    bridge.tracer = _BrokenTracer()  # type: ignore[assignment]
    await registry.cancel(1, "stop", "ip:192.0.2.1")
    assert await registry.is_cancelled(1, "ip:192.0.2.1")
    assert "exporter exploded" in caplog.text


async def test_row_gauges_for_one_registry(
    make_memory_registry: Any,
    tracer_provider: TracerProvider,
    meter_provider: MeterProvider,
    metric_reader: InMemoryMetricReader,
) -> None:
    registry: CancellationRegistry = make_memory_registry()
    otel.instrument(registry, tracer_provider=tracer_provider, meter_provider=meter_provider)
    await registry.cancel(1, None, "ip:192.0.2.1")
    await registry.cancel(2, None, "ip:192.0.2.9")
    async with registry.request(3, SESSION):
        rows = points(metric_reader, "mcp.cancellation.rows")
        in_flight = points(metric_reader, "mcp.cancellation.in_flight")
    kinds = ("session", "principal", "ip", "global", "other")
    assert rows == {
        frozenset({("mcp.cancellation.scope_kind", k)}): 2 if k == "ip" else 0 for k in kinds
    }
    assert in_flight == {
        frozenset({("mcp.cancellation.scope_kind", k)}): 1 if k == "session" else 0 for k in kinds
    }
    # A second registry on the same meter provider: the gauges add both up.
    second: CancellationRegistry = make_memory_registry()
    otel.instrument(second, tracer_provider=tracer_provider, meter_provider=meter_provider)
    await second.cancel(1, None, "principal:dave")
    rows = points(metric_reader, "mcp.cancellation.rows")
    assert rows[frozenset({("mcp.cancellation.scope_kind", "ip")})] == 2
    assert rows[frozenset({("mcp.cancellation.scope_kind", "principal")})] == 1
    otel.uninstrument(registry)
    rows = points(metric_reader, "mcp.cancellation.rows")
    assert rows[frozenset({("mcp.cancellation.scope_kind", "ip")})] == 0
    otel.uninstrument(second)
    assert points(metric_reader, "mcp.cancellation.rows") == {}
