"""What the scrape-time gauges show, computed once for both bridges (private).

A :class:`TableState` is read at collection time (the storage's summary, the limits, the
selected heavy hitters); :func:`gauge_values` turns it into the values of every gauge of
the catalogue, as ``(label values in catalogue order, value)`` pairs. The Prometheus
collector wraps them in metric families, the OpenTelemetry bridge in observations, so both
export the same series.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .._token import OTHER_TOOL
from ..scope import SCOPE_KINDS, ScopeLabeler
from ..storage._base import TableSummary
from ._catalogue import PREFIX
from ._heavy_hitters import HeavyHitter

if TYPE_CHECKING:
    from .._registry import CancellationRegistry

__all__ = ["ITEM_SEPARATOR", "GaugeValues", "TableState", "gauge_values", "ignored_by_tool"]

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
    #: Totals by kind and the largest scopes, or ``None`` when the storage could not be
    #: read.
    summary: TableSummary | None
    #: The rejected (reason, scope label) items to export, already selected.
    rejections: Sequence[HeavyHitter]
    top_k: int
    labeler: ScopeLabeler
    #: Requests of this process running past ``cancel_grace`` after their cancellation,
    #: by tool label.
    ignored: Mapping[str, int] = field(default_factory=dict)


def ignored_by_tool(registry: CancellationRegistry) -> dict[str, int]:
    """:meth:`CancellationRegistry.ignoring`, counted by tool label (``other`` always
    present, so the series exists at 0)."""
    counts = {OTHER_TOOL: 0}
    for token in registry.ignoring():
        tool = token.tool or OTHER_TOOL
        counts[tool] = counts.get(tool, 0) + 1
    return counts


def _limit(value: int | None) -> float:
    return math.inf if value is None else float(value)


def gauge_values(state: TableState) -> Iterator[GaugeValues]:
    """Every gauge of one collection (row gauges only when the stats could be read)."""
    storage = state.storage
    yield PREFIX + "storage_up", [((storage,), 1.0 if state.up else 0.0)]
    if state.summary is not None:
        yield from _row_gauges(storage, state.summary, state.labeler)
    yield PREFIX + "max_rows", [((storage,), _limit(state.max_rows))]
    yield PREFIX + "max_rows_per_scope", [((storage,), _limit(state.max_rows_per_scope))]
    points: list[tuple[tuple[str, ...], float]] = []
    for entry in state.rejections:
        reason, _, label = entry.item.partition(ITEM_SEPARATOR)
        points.append(((label, reason), float(entry.estimate)))
    yield PREFIX + "scope_rejections", points
    yield PREFIX + "ignored_cancellations", [((t,), float(n)) for t, n in state.ignored.items()]


def _row_gauges(
    storage: str, summary: TableSummary, labeler: ScopeLabeler
) -> Iterator[GaugeValues]:
    for name, by_kind in (
        (PREFIX + "rows", summary.rows),
        (PREFIX + "in_flight", summary.in_flight),
    ):
        yield name, [((storage, kind), float(by_kind.get(kind, 0))) for kind in SCOPE_KINDS]
    # The largest scopes; labels are merged (a digest or a cut may join two scopes).
    by_label: dict[str, int] = {}
    for scope, count in summary.largest:
        label = labeler(scope)
        by_label[label] = by_label.get(label, 0) + count
    yield PREFIX + "scope_rows", [((storage, label), float(n)) for label, n in by_label.items()]
    yield PREFIX + "scopes_near_quota", [((storage,), float(summary.at_least))]
    # The running tasks of the whole table (``other``: the series exists at 0).
    running = {OTHER_TOOL: 0, **summary.tasks_running}
    yield PREFIX + "tasks_running", [((storage, t), float(n)) for t, n in running.items()]
