"""What the scrape-time gauges show, computed once for both bridges (private).

A :class:`TableState` is read at collection time (the storage's stats, the limits, the
selected heavy hitters); :func:`gauge_values` turns it into the values of every gauge of
the catalogue, as ``(label values in catalogue order, value)`` pairs. The Prometheus
collector wraps them in metric families, the OpenTelemetry bridge in observations, so both
export the same series.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ..scope import SCOPE_KINDS, ScopeKind, scope_kind
from ..storage.base import StorageStats
from ._catalogue import PREFIX
from ._heavy_hitters import HeavyHitter
from ._labels import ScopeLabeler

__all__ = ["ITEM_SEPARATOR", "GaugeValues", "TableState", "gauge_values"]

#: Joins a rejection's reason and scope label into one heavy-hitters item.
ITEM_SEPARATOR = "\x1f"

#: One gauge: its catalogue name and its ``(label values, value)`` points.
GaugeValues = tuple[str, list[tuple[tuple[str, ...], float]]]


@dataclass(frozen=True, slots=True)
class TableState:
    """What one collection's gauges are computed from."""

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


def _limit(value: int | None) -> float:
    return math.inf if value is None else float(value)


def gauge_values(state: TableState) -> Iterator[GaugeValues]:
    """Every gauge of one collection (row gauges only when the stats could be read)."""
    storage = state.storage
    yield PREFIX + "storage_up", [((storage,), 1.0 if state.up else 0.0)]
    if state.stats is not None:
        yield from _row_gauges(storage, state.stats, state.top_k, state.labeler)
    yield PREFIX + "max_rows", [((storage,), _limit(state.max_rows))]
    yield PREFIX + "max_rows_per_scope", [((storage,), _limit(state.max_rows_per_scope))]
    points: list[tuple[tuple[str, ...], float]] = []
    for entry in state.rejections:
        reason, _, label = entry.item.partition(ITEM_SEPARATOR)
        points.append(((label, reason), float(entry.estimate)))
    yield PREFIX + "scope_rejections", points


def _row_gauges(
    storage: str, stats: StorageStats, top_k: int, labeler: ScopeLabeler
) -> Iterator[GaugeValues]:
    for name, table in ((PREFIX + "rows", stats.rows), (PREFIX + "in_flight", stats.in_flight)):
        by_kind: dict[ScopeKind, int] = dict.fromkeys(SCOPE_KINDS, 0)
        for scope, count in table.items():
            by_kind[scope_kind(scope)] += count
        yield name, [((storage, kind), float(count)) for kind, count in by_kind.items()]
    # Top K by rows; labels are merged first (a digest or a cut may join two scopes).
    by_label: dict[str, int] = {}
    top = heapq.nsmallest(top_k, stats.rows.items(), key=lambda kv: (-kv[1], kv[0]))
    for scope, count in top:
        label = labeler(scope)
        by_label[label] = by_label.get(label, 0) + count
    yield PREFIX + "scope_rows", [((storage, label), float(n)) for label, n in by_label.items()]
