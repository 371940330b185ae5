"""The OpenTelemetry bridge: events on the current span, cleanup spans, attributes and meter
points (injected providers)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode, Tracer

from mcp_cancellation import (
    CancellationLimitReached,
    CancellationRegistry,
    InvalidRequestId,
    signals,
)
from mcp_cancellation.scope import ScopeLabeler
from mcp_cancellation.telemetry import otel
from mcp_cancellation.telemetry.otel import _names as otel_names

from ..support import MakeRegistry
from ._util import SESSION_ID, Providers, by_name, events, points

SESSION = f"session:{SESSION_ID}"


@pytest.fixture
def server_tracer(tracer_provider: TracerProvider) -> Tracer:
    """The tracer of the server the registry runs in (its spans are the current ones)."""
    return tracer_provider.get_tracer("mcp-python-sdk")


@pytest.fixture
def registry(memory_registry: CancellationRegistry) -> CancellationRegistry:
    return memory_registry


@pytest.fixture
def instrumented(
    tracer_provider: TracerProvider, meter_provider: MeterProvider
) -> otel.OpenTelemetryBridge:
    return otel.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)


@pytest.mark.usefixtures("instrumented")
async def test_a_cancellation_is_an_event_on_the_current_span(
    registry: CancellationRegistry, server_tracer: Tracer, span_exporter: InMemorySpanExporter
) -> None:
    with server_tracer.start_as_current_span("notifications/cancelled"):
        await registry.cancel(42, "user pressed stop", SESSION, method="notifications/cancelled")
    (parent,) = span_exporter.get_finished_spans()  # no span of the bridge's own
    ((span, event),) = events([parent], otel_names.EVENT_CANCEL)
    assert span.name == "notifications/cancelled"
    assert dict(event.attributes or {}) == {
        "mcp_cancellation.request.id": "42",
        "mcp.method.name": "notifications/cancelled",
        "mcp_cancellation.source": "notification",
        "mcp_cancellation.scope_kind": "session",
        "mcp_cancellation.scope": ScopeLabeler()(SESSION),
        "mcp_cancellation.reason": "user pressed stop",
    }


@pytest.mark.usefixtures("instrumented")
async def test_disconnect_and_library_cancellations(
    registry: CancellationRegistry,
    server_tracer: Tracer,
    span_exporter: InMemorySpanExporter,
    metric_reader: InMemoryMetricReader,
) -> None:
    tracer = server_tracer
    with tracer.start_as_current_span("POST /mcp (the cancelled request)") as server:
        await registry.cancel("abc", None, "ip:192.0.2.1", method="disconnect")
    with tracer.start_as_current_span("tools/call"):
        await registry.cancel(7)
    # A closed stream is a span of its own, a child of the current one (in SSE mode the
    # app's span is current, in JSON mode none is: the same span either way).
    (disconnect,) = by_name(span_exporter.get_finished_spans(), otel_names.SPAN_CANCEL)
    assert disconnect.parent is not None
    assert disconnect.parent.span_id == server.get_span_context().span_id
    ((_, library),) = events(span_exporter.get_finished_spans(), otel_names.EVENT_CANCEL)
    assert dict(disconnect.attributes or {}) == {
        "mcp_cancellation.request.id": "abc",
        "mcp_cancellation.source": "disconnect",
        "mcp_cancellation.scope_kind": "ip",
        "mcp_cancellation.scope": "ip:192.0.2.1",
    }
    assert dict(library.attributes or {}) == {
        "mcp_cancellation.request.id": "7",
        "mcp_cancellation.source": "api",
        "mcp_cancellation.scope_kind": "global",
        "mcp_cancellation.scope": "global",
    }
    # Outside any recording span: counted, and no trace at all.
    await registry.cancel(8)
    assert len(span_exporter.get_finished_spans()) == 3
    # The metric has the Prometheus labels only (the source is on the event).
    assert points(metric_reader, "mcp_cancellation.cancelled") == {
        frozenset({("scope_kind", "ip")}): 1,
        frozenset({("scope_kind", "global")}): 2,
    }
    # Every label combination exists from the first collection, at 0.
    assert len(points(metric_reader, "mcp_cancellation.cancelled", zeros=True)) == 5
    assert len(points(metric_reader, "mcp_cancellation.rejected", zeros=True)) == 15


@pytest.mark.usefixtures("instrumented")
async def test_cleanup_span_spans_the_pass(
    registry: CancellationRegistry,
    span_exporter: InMemorySpanExporter,
    metric_reader: InMemoryMetricReader,
) -> None:
    for request_id in range(3):
        await registry.cancel(request_id, None, "ip:192.0.2.1")
    await asyncio.create_task(registry.track(9, "ip:192.0.2.1"))  # owner ends, row stays
    sent: list[dict[str, Any]] = []

    def capture(sender: object, **kwargs: Any) -> None:
        sent.append(kwargs)

    with signals.cancellation_cleanup.connected_to(capture, sender=registry):
        assert await registry.cleanup(ttl=1e-9) == (3, 1)
    (span,) = by_name(span_exporter.get_finished_spans(), otel_names.SPAN_CLEANUP)
    (signal,) = sent
    assert span.start_time == signal["start_time_ns"]
    assert span.end_time == signal["start_time_ns"] + round(signal["duration"] * 1e9)
    assert dict(span.attributes or {}) == {
        "mcp_cancellation.removed": 3,
        "mcp_cancellation.in_flight_removed": 1,
    }
    assert points(metric_reader, "mcp_cancellation.cleanup_removed") == {
        frozenset({("table", "cancellations")}): 3,
        frozenset({("table", "in_flight")}): 1,
    }


@pytest.mark.usefixtures("instrumented")
async def test_a_cleanup_pass_that_removed_nothing_leaves_no_span(
    registry: CancellationRegistry, span_exporter: InMemorySpanExporter
) -> None:
    """The janitor runs every minute on every worker: an idle pass is not a trace."""
    assert await registry.cleanup(ttl=300) == (0, 0)
    assert by_name(span_exporter.get_finished_spans(), otel_names.SPAN_CLEANUP) == []
    await registry.cancel(1, None, "ip:192.0.2.1")
    assert await registry.cleanup(ttl=1e-9) == (1, 0)
    assert len(by_name(span_exporter.get_finished_spans(), otel_names.SPAN_CLEANUP)) == 1


@pytest.mark.usefixtures("instrumented")
async def test_a_flood_batch_leaves_the_span_room(
    make_registry: MakeRegistry,
    server_tracer: Tracer,
    span_exporter: InMemorySpanExporter,
    metric_reader: InMemoryMetricReader,
) -> None:
    """An insert that evicts a flood's batch of 200 one-row scopes, inside a request span
    that already has an event of its own: an event for each of the EVICT_EVENTS largest
    (first evicted) scopes, in eviction order, then the insert's cancel event, and nothing
    dropped (an event per scope would pass the SDK's 128 and push the oldest out); the
    counter counts every row, by kind, from the one batch signal."""
    registry: CancellationRegistry = make_registry(max_rows=4_000, max_rows_per_scope=None)
    scopes = [f"ip:10.7.{i >> 8}.{i & 255}" if i % 2 else f"principal:p-{i}" for i in range(4_000)]
    for scope in scopes:
        await registry.cancel(1, None, scope)
    assert not signals.cancellation_evicted.receivers  # the bridge takes the batch only
    with server_tracer.start_as_current_span("POST /mcp (flood)") as current:
        current.add_event("app.request.parsed")
        await registry.cancel(1, None, "ip:203.0.113.9")  # evicts 200 one-row scopes
    (span,) = by_name(span_exporter.get_finished_spans(), "POST /mcp (flood)")
    assert span.dropped_events == 0
    app, *evicts, cancel = span.events
    assert (app.name, cancel.name) == ("app.request.parsed", otel_names.EVENT_CANCEL)
    assert len(evicts) == otel.EVICT_EVENTS
    assert all(event.name == otel_names.EVENT_EVICT for event in evicts)
    assert [dict(event.attributes or {}) for event in evicts] == [
        {
            "mcp_cancellation.scope_kind": scope.split(":")[0],
            "mcp_cancellation.scope": scope,
            "mcp_cancellation.evicted": 1,
        }
        for scope in scopes[: otel.EVICT_EVENTS]
    ]
    assert points(metric_reader, "mcp_cancellation.evicted") == {
        frozenset({("scope_kind", "ip")}): 100,
        frozenset({("scope_kind", "principal")}): 100,
    }


@pytest.mark.usefixtures("instrumented")
async def test_evictions_and_rejections(
    make_registry: MakeRegistry,
    server_tracer: Tracer,
    span_exporter: InMemorySpanExporter,
    metric_reader: InMemoryMetricReader,
) -> None:
    registry: CancellationRegistry = make_registry(max_rows=2, max_rows_per_scope=2)
    await registry.cancel(1, None, SESSION)
    await registry.cancel(2, None, SESSION)
    with server_tracer.start_as_current_span("POST /mcp"):
        with pytest.raises(CancellationLimitReached):
            await registry.cancel(3, None, SESSION)
        with pytest.raises(InvalidRequestId):
            await registry.cancel(2.5, None, "principal:carol")
    for _ in range(100):  # a flood outside any span: counted, no trace of its own
        with pytest.raises(InvalidRequestId):
            await registry.cancel(True, None, "ip:198.51.100.1")
    with server_tracer.start_as_current_span("POST /mcp (evicting)"):
        await registry.cancel(1, None, "principal:carol")  # cap reached: evicts a session row
    spans = span_exporter.get_finished_spans()
    # Rejections are events on the current span, never spans.
    (request,) = by_name(spans, "POST /mcp")
    (evicting,) = by_name(spans, "POST /mcp (evicting)")
    quota, invalid = request.events
    assert quota.name == invalid.name == otel_names.EVENT_REJECTED
    assert dict(quota.attributes or {}) == {
        "error.type": "quota",
        "mcp_cancellation.scope_kind": "session",
        "mcp_cancellation.scope": ScopeLabeler()(SESSION),
    }
    assert dict(invalid.attributes or {}) == {
        "error.type": "invalid_request_id",
        "mcp_cancellation.scope_kind": "principal",
        "mcp_cancellation.scope": "principal:carol",
    }
    assert request.status.status_code is StatusCode.UNSET  # the server decides its status
    # The server's spans only: none per cancellation, eviction or rejection.
    assert sorted(span.name for span in spans) == ["POST /mcp", "POST /mcp (evicting)"]
    # The evicting insert's span: the eviction, then the cancellation it made room for.
    evict, cancel = evicting.events
    assert (evict.name, cancel.name) == (otel_names.EVENT_EVICT, otel_names.EVENT_CANCEL)
    assert dict(evict.attributes or {}) == {
        "mcp_cancellation.scope_kind": "session",
        "mcp_cancellation.scope": ScopeLabeler()(SESSION),
        "mcp_cancellation.evicted": 1,
    }
    assert points(metric_reader, "mcp_cancellation.evicted") == {
        frozenset({("scope_kind", "session")}): 1
    }
    assert points(metric_reader, "mcp_cancellation.rejected") == {
        frozenset(
            {
                ("scope_kind", "session"),
                ("reason", "quota"),
                ("mode", "enforce"),
            }
        ): 1,
        frozenset(
            {
                ("scope_kind", "principal"),
                ("reason", "invalid_request_id"),
                ("mode", "enforce"),
            }
        ): 1,
        frozenset(
            {("scope_kind", "ip"), ("reason", "invalid_request_id"), ("mode", "enforce")}
        ): 100,
    }
    for span in spans:  # the session id is never exported
        for event in span.events:
            assert set(event.attributes or {}) <= otel_names.ATTRIBUTES
            assert all(SESSION_ID not in str(v) for v in (event.attributes or {}).values())


async def test_instrument_is_idempotent_and_uninstrument_stops(
    make_registry: MakeRegistry,
    providers: Providers,
    server_tracer: Tracer,
    span_exporter: InMemorySpanExporter,
) -> None:
    registry: CancellationRegistry = make_registry()
    before = len(signals.request_cancelled.receivers)
    first = otel.instrument(**providers)
    assert otel.instrument(tracer_provider=providers["tracer_provider"]) is first
    assert otel.instrumented()
    with server_tracer.start_as_current_span("request"):
        await registry.cancel(1)
    assert len(events(span_exporter.get_finished_spans(), otel_names.EVENT_CANCEL)) == 1
    otel.uninstrument()
    otel.uninstrument()
    assert not otel.instrumented()
    assert len(signals.request_cancelled.receivers) == before
    with server_tracer.start_as_current_span("request"):
        await registry.cancel(2)
    assert len(events(span_exporter.get_finished_spans(), otel_names.EVENT_CANCEL)) == 1
    with pytest.raises(TypeError):
        otel.instrument(providers["tracer_provider"])  # type: ignore[arg-type]


async def test_instrument_one_registry_only(
    make_registry: MakeRegistry,
    providers: Providers,
    server_tracer: Tracer,
    span_exporter: InMemorySpanExporter,
) -> None:
    watched: CancellationRegistry = make_registry()
    other: CancellationRegistry = make_registry()
    bridge = otel.instrument(watched, **providers)
    assert otel.instrument(watched) is bridge
    assert otel.instrumented(watched)
    assert not otel.instrumented(other)
    with server_tracer.start_as_current_span("request"):
        await watched.cancel(1)
        await other.cancel(2)
        otel.uninstrument(watched)
        assert not otel.instrumented(watched)
        await watched.cancel(3)
    ((_, event),) = events(span_exporter.get_finished_spans(), otel_names.EVENT_CANCEL)
    assert (event.attributes or {})["mcp_cancellation.request.id"] == "1"


async def test_hash_key_applies_to_span_attributes(
    registry: CancellationRegistry, providers: Providers, span_exporter: InMemorySpanExporter
) -> None:
    otel.instrument(registry, **providers, hash_key="k")
    # Outside any span, a notification's cancellation gets a span of its own.
    await registry.cancel(1, None, SESSION, method="notifications/cancelled")
    (span,) = by_name(span_exporter.get_finished_spans(), otel_names.SPAN_CANCEL)
    scope = (span.attributes or {})["mcp_cancellation.scope"]
    assert scope == ScopeLabeler("k")(SESSION) != ScopeLabeler()(SESSION)


def _broken_labeler(scope: str) -> str:
    raise RuntimeError("exporter exploded")


async def test_a_failing_receiver_never_breaks_cancel(
    make_registry: MakeRegistry,
    providers: Providers,
    server_tracer: Tracer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry: CancellationRegistry = make_registry()
    bridge = otel.instrument(registry, **providers)
    bridge.labeler = _broken_labeler  # type: ignore[assignment]
    with server_tracer.start_as_current_span("request"):
        await registry.cancel(1, "stop", "ip:192.0.2.1")
    assert await registry.is_cancelled(1, "ip:192.0.2.1")
    assert "exporter exploded" in caplog.text


async def test_disabled_limits_export_no_point_and_no_warning(
    make_registry: MakeRegistry,
    providers: Providers,
    metric_reader: InMemoryMetricReader,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``max_rows=None`` reads +Inf in Prometheus; OpenTelemetry takes finite values only
    (its SDK warns "non-finite value" at every collection), so the limit has no point."""
    registry: CancellationRegistry = make_registry(max_rows=None, max_rows_per_scope=None)
    otel.instrument(registry, **providers)
    caplog.set_level(logging.WARNING)
    for _ in range(2):
        assert points(metric_reader, "mcp_cancellation.max_rows", zeros=True) == {}
        assert points(metric_reader, "mcp_cancellation.max_rows_per_scope", zeros=True) == {}
    assert "non-finite" not in caplog.text


async def test_row_gauges_for_one_registry(
    make_registry: MakeRegistry,
    providers: Providers,
    metric_reader: InMemoryMetricReader,
) -> None:
    registry: CancellationRegistry = make_registry(max_rows_per_scope=5)
    storage = registry.storage.identity
    otel.instrument(registry, **providers)
    await registry.cancel(1, None, "ip:192.0.2.1")
    await registry.cancel(2, None, "ip:192.0.2.9")
    async with registry.request(3, SESSION):
        rows = points(metric_reader, "mcp_cancellation.rows", zeros=True)
        in_flight = points(metric_reader, "mcp_cancellation.in_flight", zeros=True)
        limits = points(metric_reader, "mcp_cancellation.max_rows_per_scope", zeros=True)
        up = points(metric_reader, "mcp_cancellation.storage_up", zeros=True)
        top = points(metric_reader, "mcp_cancellation.scope_rows")
    kinds = ("session", "principal", "ip", "global", "other")
    assert rows == {
        frozenset({("storage", storage), ("scope_kind", k)}): 2 if k == "ip" else 0 for k in kinds
    }
    assert in_flight == {
        frozenset({("storage", storage), ("scope_kind", k)}): 1 if k == "session" else 0
        for k in kinds
    }
    assert limits == {frozenset({("storage", storage)}): 5}
    assert up == {frozenset({("storage", storage)}): 1}
    assert top == {
        frozenset({("storage", storage), ("scope", "ip:192.0.2.1")}): 1,
        frozenset({("storage", storage), ("scope", "ip:192.0.2.9")}): 1,
    }
    # A second registry on the same meter provider: observed with its own storage label.
    second: CancellationRegistry = make_registry()
    other = second.storage.identity
    otel.instrument(second, **providers)
    await second.cancel(1, None, "principal:dave")
    rows = points(metric_reader, "mcp_cancellation.rows")
    assert rows == {
        frozenset({("storage", storage), ("scope_kind", "ip")}): 2,
        frozenset({("storage", other), ("scope_kind", "principal")}): 1,
    }
    otel.uninstrument(registry)
    rows = points(metric_reader, "mcp_cancellation.rows")
    assert rows == {frozenset({("storage", other), ("scope_kind", "principal")}): 1}
    otel.uninstrument(second)
    assert points(metric_reader, "mcp_cancellation.rows") == {}
