"""Scrape-time gauges (the prometheus_client custom-collector pattern): computed from the
registry's state when Prometheus scrapes, never updated on the hot path."""

from __future__ import annotations

import heapq
import math
import weakref
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..._extras import requires
from ...scope import SCOPE_KINDS, ScopeKind, scope_kind
from ...storage.base import StorageStats
from .._heavy_hitters import HeavyHitter
from .._labels import ScopeLabeler
from .catalogue import ALL, METRICS, PREFIX

with requires("prometheus", "The Prometheus bridge (mcp_cancellation.telemetry.prometheus)"):
    from prometheus_client.core import GaugeMetricFamily, Metric

__all__ = ["ITEM_SEPARATOR", "GaugeState", "StateCollector", "gauges"]


#: Joins a rejection's reason and scope label into one heavy-hitters item.
ITEM_SEPARATOR = "\x1f"


@dataclass(frozen=True, slots=True)
class GaugeState:
    """What one scrape's gauges are computed from."""

    #: The storage's identity (the ``storage`` label) and whether it answered.
    storage: str
    up: bool
    max_rows: int | None
    max_rows_per_scope: int | None
    #: Row counts per scope, or ``None`` when the storage could not be read.
    stats: StorageStats | None
    #: The rejected (reason, scope label) items to export, already selected.
    rejections: Sequence[HeavyHitter]
    top_k: int
    labeler: ScopeLabeler


class GaugeSource(Protocol):
    def gauge_state(self) -> GaugeState | None: ...


def _limit(value: int | None) -> float:
    return math.inf if value is None else float(value)


def _gauge(name: str) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, METRICS[name].help, labels=METRICS[name].labels)


def gauges(state: GaugeState) -> Iterator[Metric]:
    """Every gauge family of one scrape."""
    storage = state.storage
    up = _gauge(PREFIX + "storage_up")
    up.add_metric((storage,), 1.0 if state.up else 0.0)
    yield up
    if state.stats is not None:
        yield from _row_gauges(storage, state.stats, state.top_k, state.labeler)
    for name, value in (
        ("max_rows", state.max_rows),
        ("max_rows_per_scope", state.max_rows_per_scope),
    ):
        family = _gauge(PREFIX + name)
        family.add_metric((storage,), _limit(value))
        yield family
    rejections = _gauge(PREFIX + "scope_rejections")
    for entry in state.rejections:
        reason, _, label = entry.item.partition(ITEM_SEPARATOR)
        rejections.add_metric((label, reason), entry.estimate)
    yield rejections


def _row_gauges(
    storage: str, stats: StorageStats, top_k: int, labeler: ScopeLabeler
) -> Iterator[Metric]:
    for name, table in ((PREFIX + "rows", stats.rows), (PREFIX + "in_flight", stats.in_flight)):
        by_kind: dict[ScopeKind, int] = dict.fromkeys(SCOPE_KINDS, 0)
        for scope, count in table.items():
            by_kind[scope_kind(scope)] += count
        family = _gauge(name)
        for kind, count in by_kind.items():
            family.add_metric((storage, kind), count)
        yield family
    # Top K by rows; labels are merged first (a digest or a cut may join two scopes).
    by_label: dict[str, int] = {}
    top = heapq.nsmallest(top_k, stats.rows.items(), key=lambda kv: (-kv[1], kv[0]))
    for scope, count in top:
        label = labeler(scope)
        by_label[label] = by_label.get(label, 0) + count
    family = _gauge(PREFIX + "scope_rows")
    for label, count in by_label.items():
        family.add_metric((storage, label), count)
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
