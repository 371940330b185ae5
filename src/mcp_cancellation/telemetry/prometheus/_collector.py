"""Scrape-time gauges (the prometheus_client custom-collector pattern): computed from the
registry's state when Prometheus scrapes, never updated on the hot path."""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Iterator
from typing import Protocol

from ..._extras import requires
from .._table_state import TableState, gauge_values
from ._catalogue import ALL, METRICS

with requires("prometheus", "The Prometheus bridge (mcp_cancellation.telemetry.prometheus)"):
    from prometheus_client.core import GaugeMetricFamily, Metric

__all__ = ["GaugeState", "StateCollector", "gauges"]

#: What one scrape's gauges are computed from (shared with the OpenTelemetry bridge).
GaugeState = TableState


class GaugeSource(Protocol):
    def gauge_state(self) -> TableState | None: ...


def gauges(state: TableState) -> Iterator[Metric]:
    """Every gauge family of one scrape."""
    for name, points in gauge_values(state):
        info = METRICS[name]
        family = GaugeMetricFamily(name, info.help, labels=info.labels)
        for labels, value in points:
            family.add_metric(labels, value)
        yield family


class StateCollector:
    """The collector registered for one bridge (held weakly: a collected bridge exports
    nothing)."""

    def __init__(self, source: GaugeSource) -> None:
        self._source = weakref.ref(source)

    def describe(self) -> Iterable[Metric]:
        for info in ALL:
            if info.type == "gauge":
                yield GaugeMetricFamily(info.name, info.help, labels=info.labels)

    def collect(self) -> Iterator[Metric]:
        source = self._source()
        state = source.gauge_state() if source is not None else None
        if state is not None:
            yield from gauges(state)
