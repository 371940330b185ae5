"""Helpers for the telemetry tests: the injected OpenTelemetry providers and what they
recorded, and parsing a Prometheus exposition sample by sample."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypedDict

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from prometheus_client.parser import text_string_to_metric_families

from mcp_cancellation import __version__
from mcp_cancellation.telemetry.otel import _names as otel_names

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]

#: A session id used by tests; it must never appear in anything exported.
SESSION_ID = "S3cr3t-session-0f8c2a91d7e44b1c"


class Providers(TypedDict):
    """A test's own providers, as ``otel.instrument(**providers)`` takes them."""

    tracer_provider: TracerProvider
    meter_provider: MeterProvider


def samples(text: str) -> Samples:
    """Every sample of an exposition: ``(name, labels) -> value``; duplicates fail."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in out, f"duplicate series {key}"
            out[key] = sample.value
    return out


def value(parsed: Samples, name: str, **labels: str) -> float:
    """The value of one series; a missing series fails the test."""
    key = (name, frozenset(labels.items()))
    assert key in parsed, f"no series {name}{labels}"
    return parsed[key]


def series(parsed: Samples, name: str) -> dict[frozenset[tuple[str, str]], float]:
    """Every series of one sample name, by label set."""
    return {labels: v for (n, labels), v in parsed.items() if n == name}


def by_name(spans: Iterable[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]


def events(spans: Iterable[ReadableSpan], name: str) -> list[tuple[ReadableSpan, Any]]:
    """Every event called *name*, with the span it is on, in the order they were added."""
    return [(span, event) for span in spans for event in span.events if event.name == name]


def points(
    reader: InMemoryMetricReader, name: str, zeros: bool = False
) -> dict[frozenset[Any], float]:
    """Sum data points of one instrument, by attribute set (counters' pre-created zero
    points left out unless *zeros*)."""
    data = reader.get_metrics_data()
    out: dict[frozenset[Any], float] = {}
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            assert scope.scope.name == otel_names.INSTRUMENTATION_NAME
            assert scope.scope.version == __version__
            for metric in scope.metrics:
                if metric.name == name:
                    for point in metric.data.data_points:
                        assert isinstance(point, NumberDataPoint)
                        if zeros or point.value != 0:
                            out[frozenset((point.attributes or {}).items())] = point.value
    return out
