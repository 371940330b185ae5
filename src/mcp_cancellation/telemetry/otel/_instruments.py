"""The meter instruments of the OpenTelemetry bridge (private): in-process tallies read by
observable counters, the histograms, and the observable gauges that bridges of several
registries on one meter share."""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

from opentelemetry.metrics import CallbackOptions, Observation

from ..._token import OTHER_TOOL
from ...scope import SCOPE_KINDS
from ...storage._base import STORAGE_OPERATIONS
from .._catalogue import (
    CANCEL_TO_STOP_BUCKETS,
    METRICS,
    OPERATION_BUCKETS,
    OPERATION_DURATION_OTEL,
    PREFIX,
    REJECTIONS,
    TABLES,
    TASK_BUCKETS,
    TASK_REJECT_REASONS,
    TASK_STATUSES,
    otel_name,
)
from .._table_state import TableState, gauge_values
from ._names import CLEANUP_BUCKETS, DURATION, UNITS

if TYPE_CHECKING:
    from opentelemetry import metrics

__all__ = ["Instruments", "Observed", "instruments", "join_gauge"]


class Observed(Protocol):
    """What a gauge observes: a bridge's table state for this collection."""

    def table_state(self) -> TableState | None: ...


class Tally:
    """A monotonic count per label combination, kept in the process and reported by an
    observable counter at collection time.

    A synchronous SDK counter's ``add`` costs about 9 µs (attribute set, exemplar filter,
    aggregation lookup): more than the ``cancel()`` it counts. Adding to this tally costs a
    lock and a dict update; the exported metric (a cumulative monotonic sum, a Prometheus
    counter) is the same.
    """

    def __init__(self, labels: tuple[str, ...], combinations: Iterable[tuple[str, ...]]) -> None:
        self._labels = labels
        self._lock = threading.Lock()
        # Every combination at 0 from the start, so that rate() sees the first event.
        self._counts: dict[tuple[str, ...], int] = dict.fromkeys(combinations, 0)

    def add(self, values: tuple[str, ...], amount: int = 1) -> None:
        with self._lock:
            self._counts[values] = self._counts.get(values, 0) + amount

    def observe(self, options: CallbackOptions) -> list[Observation]:
        with self._lock:
            counts = list(self._counts.items())
        return [Observation(n, dict(zip(self._labels, v, strict=True))) for v, n in counts]


class Instruments:
    """The counters and the histogram of one meter (a provider hands out one instrument
    per name, so bridges on one meter share them and their counts add up)."""

    def __init__(self, meter: metrics.Meter) -> None:
        def counter(name: str) -> Any:
            info = METRICS[PREFIX + name + "_total"]
            return meter.create_counter(otel_name(info.name), UNITS[name + "_total"], info.help)

        def tally(name: str, combinations: Iterable[tuple[str, ...]]) -> Tally:
            info = METRICS[PREFIX + name + "_total"]
            found = Tally(info.labels, combinations)
            meter.create_observable_counter(
                otel_name(info.name), [found.observe], UNITS[name + "_total"], info.help
            )
            return found

        # The per-call counters are tallies; the rare ones stay synchronous.
        self.cancelled = tally("cancelled", ((k,) for k in SCOPE_KINDS))
        self.rejected = tally("rejected", ((k, r, m) for k in SCOPE_KINDS for r, m in REJECTIONS))
        self.evicted = tally("evicted", ((k,) for k in SCOPE_KINDS))
        self.ignored = tally("cancellations_ignored", [(OTHER_TOOL,)])
        stop = METRICS[PREFIX + "cancel_to_stop_seconds"]
        self.stop = meter.create_histogram(
            otel_name(stop.name),
            "s",
            stop.help,
            explicit_bucket_boundaries_advisory=list(CANCEL_TO_STOP_BUCKETS),
        )
        self.operations = meter.create_histogram(
            OPERATION_DURATION_OTEL,
            "s",
            "Duration of MCP requests as the server handled them.",
            explicit_bucket_boundaries_advisory=list(OPERATION_BUCKETS),
        )
        self.tasks_created = tally("tasks_created", [(OTHER_TOOL,)])
        self.tasks_ended = tally("tasks_ended", ((OTHER_TOOL, s) for s in TASK_STATUSES))
        self.tasks_rejected = tally(
            "tasks_rejected", ((k, r) for k in SCOPE_KINDS for r in TASK_REJECT_REASONS)
        )
        task = METRICS[PREFIX + "task_duration_seconds"]
        self.task_seconds = meter.create_histogram(
            otel_name(task.name),
            "s",
            task.help,
            explicit_bucket_boundaries_advisory=list(TASK_BUCKETS),
        )
        self.removed = counter("cleanup_removed")
        self.storage_errors = counter("storage_errors")
        self.operator = counter("operator_cancelled")
        self.duration = meter.create_histogram(
            DURATION,
            "s",
            "Duration of cleanup passes.",
            explicit_bucket_boundaries_advisory=list(CLEANUP_BUCKETS),
        )

    def zero(self, storage: str | None) -> None:
        """Every label combination of the synchronous counters at 0 (the tallies start
        so), so that rate() sees the first event."""
        for table in TABLES:
            self.removed.add(0, {"table": table})
        for kind in SCOPE_KINDS:
            self.operator.add(0, {"scope_kind": kind})
        if storage is not None:
            for operation in STORAGE_OPERATIONS:
                self.storage_errors.add(0, {"storage": storage, "operation": operation})


_instruments_lock = threading.Lock()
_by_meter: weakref.WeakKeyDictionary[Any, Instruments] = weakref.WeakKeyDictionary()


def instruments(meter: metrics.Meter) -> Instruments:
    with _instruments_lock:
        found = _by_meter.get(meter)
        if found is None:
            found = _by_meter[meter] = Instruments(meter)
        return found


class GaugeMembers:
    """The bridges observed by one observable gauge (one per meter and catalogue gauge).

    A meter provider hands out one instrument per name, keeping the first callback, so
    bridges of several registries on one provider join the first one's member set; each
    observes its own table, with its own ``storage`` label.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.labels = METRICS[name].labels
        self.bridges: weakref.WeakSet[Observed] = weakref.WeakSet()

    def observe(self, options: CallbackOptions) -> list[Observation]:
        observations: list[Observation] = []
        for bridge in list(self.bridges):
            state = bridge.table_state()
            if state is None:
                continue
            for name, points in gauge_values(state):
                if name == self.name:
                    for values, value in points:
                        if not math.isfinite(value):
                            # A disabled limit (+Inf in Prometheus): OpenTelemetry takes
                            # finite values only (its SDK warns at every collection).
                            continue
                        attributes = dict(zip(self.labels, values, strict=True))
                        observations.append(Observation(value, attributes))
        return observations


_gauges: weakref.WeakKeyDictionary[Any, GaugeMembers] = weakref.WeakKeyDictionary()
_gauges_lock = threading.Lock()


def join_gauge(meter: metrics.Meter, name: str, bridge: Observed) -> None:
    with _gauges_lock:
        members = GaugeMembers(name)
        instrument = meter.create_observable_gauge(
            otel_name(name),
            [members.observe],
            UNITS[name.removeprefix(PREFIX)],
            METRICS[name].help,
        )
        members = _gauges.setdefault(instrument, members)
        members.bridges.add(bridge)
