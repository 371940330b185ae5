"""Scrape-time gauges (the prometheus_client custom-collector pattern): computed from the
registry's state when Prometheus scrapes, never updated on the hot path."""

from __future__ import annotations

import heapq
import math
import weakref
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from ..._extras import requires
from ...scope import SCOPE_KINDS, ScopeKind, scope_kind
from ...storage.base import StorageStats
from .._labels import ScopeLabeler
from .catalogue import ALL, METRICS, PREFIX

with requires("prometheus", "The Prometheus bridge (mcp_cancellation.telemetry.prometheus)"):
    from prometheus_client.core import GaugeMetricFamily, Metric

__all__ = ["GaugeState", "StateCollector", "gauges"]


@dataclass(frozen=True, slots=True)
class GaugeState:
    """What one scrape's gauges are computed from."""

    max_rows: int | None
    max_rows_per_scope: int | None
    #: Row counts per scope, or ``None`` when the storage could not be read.
    stats: StorageStats | None
    #: Rejections per scope label (heavy hitters, summed over processes).
    rejections: Mapping[str, int]
    top_k: int
    labeler: ScopeLabeler


class GaugeSource(Protocol):
    def gauge_state(self) -> GaugeState | None: ...


def _limit(value: int | None) -> float:
    return math.inf if value is None else float(value)


def _top(counts: Mapping[str, int], k: int) -> list[tuple[str, int]]:
    return heapq.nsmallest(k, counts.items(), key=lambda kv: (-kv[1], kv[0]))


def _gauge(name: str, labels: tuple[str, ...] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, METRICS[name].help, labels=labels)


def gauges(state: GaugeState) -> Iterator[Metric]:
    """Every gauge family of one scrape."""
    if state.stats is not None:
        yield from _row_gauges(state.stats, state.top_k, state.labeler)
    yield GaugeMetricFamily(
        PREFIX + "max_rows", METRICS[PREFIX + "max_rows"].help, _limit(state.max_rows)
    )
    yield GaugeMetricFamily(
        PREFIX + "max_rows_per_scope",
        METRICS[PREFIX + "max_rows_per_scope"].help,
        _limit(state.max_rows_per_scope),
    )
    rejections = _gauge(PREFIX + "scope_rejections", ("scope",))
    for label, count in _top(state.rejections, state.top_k):
        rejections.add_metric((label,), count)
    yield rejections


def _row_gauges(stats: StorageStats, top_k: int, labeler: ScopeLabeler) -> Iterator[Metric]:
    for name, table in ((PREFIX + "rows", stats.rows), (PREFIX + "in_flight", stats.in_flight)):
        by_kind: dict[ScopeKind, int] = dict.fromkeys(SCOPE_KINDS, 0)
        for scope, count in table.items():
            by_kind[scope_kind(scope)] += count
        family = _gauge(name, ("scope_kind",))
        for kind, count in by_kind.items():
            family.add_metric((kind,), count)
        yield family
    # Top K by rows; labels are merged first (a digest or a cut may join two scopes).
    by_label: dict[str, int] = {}
    for scope, count in _top(stats.rows, top_k):
        label = labeler(scope)
        by_label[label] = by_label.get(label, 0) + count
    family = _gauge(PREFIX + "scope_rows", ("scope",))
    for label, count in by_label.items():
        family.add_metric((label,), count)
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
