"""Helpers for the telemetry tests: the injected OpenTelemetry providers, and parsing a
Prometheus exposition sample by sample."""

from __future__ import annotations

from typing import TypedDict

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client.parser import text_string_to_metric_families

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
