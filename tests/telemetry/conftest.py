"""Fixtures for the telemetry bridges: injected OTel providers, fresh Prometheus registries.

Nothing here sets global providers or touches ``prometheus_client.REGISTRY``; each test gets
its own ``TracerProvider`` with an ``InMemorySpanExporter``, its own ``MeterProvider`` with an
``InMemoryMetricReader`` and its own ``CollectorRegistry``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from mcp_cancellation import CancellationRegistry, MemoryStorage, signals
from mcp_cancellation.storage import Storage
from mcp_cancellation.telemetry import otel
from mcp_cancellation.telemetry.prometheus import PrometheusBridge

from ..support import MakeRegistry
from ._otlp import Receiver
from ._util import Providers


@pytest.fixture
def collector_registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def span_exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def tracer_provider(span_exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(span_exporter))
    yield provider
    provider.shutdown()


@pytest.fixture
def metric_reader() -> InMemoryMetricReader:
    return InMemoryMetricReader()


@pytest.fixture
def meter_provider(metric_reader: InMemoryMetricReader) -> Iterator[MeterProvider]:
    provider = MeterProvider(metric_readers=[metric_reader])
    yield provider
    provider.shutdown()


@pytest.fixture
def providers(tracer_provider: TracerProvider, meter_provider: MeterProvider) -> Providers:
    return {"tracer_provider": tracer_provider, "meter_provider": meter_provider}


_SIGNALS = (
    signals.request_cancelled,
    signals.cancellation_cleanup,
    signals.cancellation_evicted,
    signals.cancellation_evicted_batch,
    signals.cancellation_rejected,
)


@pytest.fixture(autouse=True)
def _no_leftover_bridges() -> Iterator[None]:
    """Every test ends with the bridges it installed uninstalled, so that no receiver of
    ours outlives it (other test areas may count the signals' receivers)."""
    otel.uninstrument()
    before = {id(r) for signal in _SIGNALS for r in signal.receivers.values()}
    yield
    otel.uninstrument()
    for signal in _SIGNALS:
        for receiver in list(signal.receivers.values()):
            owner = getattr(receiver, "__self__", None)
            if id(receiver) not in before and isinstance(
                owner, PrometheusBridge | otel.OpenTelemetryBridge
            ):
                owner.uninstall()


@pytest.fixture
def make_storage() -> Callable[[], Storage]:
    """The bridges are tested on the memory storage (``make_registry`` builds on it)."""
    return MemoryStorage


@pytest.fixture
def memory_registry(make_registry: MakeRegistry) -> CancellationRegistry:
    """One in-memory registry with default limits."""
    return make_registry()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A loopback OTLP/HTTP receiver, serving for the test."""
    found = Receiver()
    found.thread.start()
    yield found
    found.server.shutdown()
    found.server.server_close()
