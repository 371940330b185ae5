"""OpenTelemetry bridge: the registry's signals as spans, span events and metrics.

:func:`instrument` connects to :mod:`mcp_cancellation.signals`; :func:`uninstrument`
disconnects. Signals are sent synchronously by the task that called the registry, so the
*current* span is the caller's: the HTTP server span of a ``notifications/cancelled`` POST
(the middleware answers it in front of the SDK), the SDK's request span for
``registry.cancel()`` from tool code, no parent for the janitor.

Spans and events (tracer ``mcp_cancellation``, the package version). The package's own
attributes live under ``mcp_cancellation.*``; ``mcp.method.name`` is the MCP semantic
convention's, and is set only where it names the message being handled:

``mcp_cancellation.cancel`` (event on the current span)
    a recorded cancellation, on the span of the message that cancelled (the server span of
    a ``notifications/cancelled`` POST, the tool's span for ``registry.cancel()``, the
    cancelled request's own span for a disconnect): ``mcp_cancellation.request.id`` (the id
    of the *cancelled* request; ``jsonrpc.request.id`` is not set, since the span may not
    be that request's), ``mcp.method.name`` (``notifications/cancelled`` when it came from
    one), ``mcp_cancellation.source`` (``notification``, ``disconnect``, ``api`` or
    ``other``), ``mcp_cancellation.scope_kind``, ``mcp_cancellation.scope`` (session scopes
    hashed), ``mcp_cancellation.reason`` (when given; sanitised and truncated). With no
    recording span there is no trace of it (a span per cancel cost ~20 µs and a root trace
    each); the counter ``mcp_cancellation.cancelled`` counts every one.
``mcp_cancellation.cleanup`` (span)
    one cleanup pass, starting and ending when the pass did: ``mcp_cancellation.removed``,
    ``mcp_cancellation.in_flight_removed``.
``mcp_cancellation.evict`` (event on the current span)
    the global cap evicted rows of one scope, on the span of the insert that evicted (one
    event per scope of the batch): ``mcp_cancellation.scope_kind``,
    ``mcp_cancellation.scope``, ``mcp_cancellation.evicted``. An event, for the reason a
    rejection is one: a flood's batch of thousands of one-row scopes must not become
    thousands of traces.
``mcp_cancellation.rejected`` (event on the current span)
    a refused cancellation: ``error.type`` (``quota`` or ``invalid_request_id``),
    ``mcp_cancellation.scope_kind``, ``mcp_cancellation.scope``. An event, not a span: a
    flood of rejections must not create a trace per rejection; the counter
    ``mcp_cancellation.rejected`` counts every one, traced or not.

Metrics (meter ``mcp_cancellation``): exactly the catalogue of
:mod:`mcp_cancellation.telemetry.prometheus.catalogue`, so that an OpenTelemetry Prometheus
exporter (or a collector receiving OTLP) produces the names, label names and types the
shipped dashboards and alerts query. Instrument ``mcp_cancellation.X`` becomes the
Prometheus metric ``mcp_cancellation_X`` (counters ``..._total``); attributes are the
Prometheus label names (``scope_kind``, ``reason``, ``table``, ``storage``, ``operation``,
``scope``). Gauges are observed at collection time for an instrumented registry, from one
read of its storage per collection (at most ``stats_timeout`` seconds, on a Redis storage's
own loop). The histogram ``mcp_cancellation.cleanup.duration`` (seconds, buckets from 1 ms
to 10 s) is OpenTelemetry's only. See ``docs/metrics.md``.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final

from .. import signals
from ..__about__ import __version__
from .._extras import requires
from ..scope import SCOPE_KINDS, scope_kind
from ..storage.base import STORAGE_OPERATIONS, Storage
from ..token import OTHER_TOOL
from ._bridge import Bridge, Receivers, Setups
from ._catalogue import (
    ALL,
    CANCEL_TO_STOP_BUCKETS,
    METRICS,
    OUTCOMES,
    PREFIX,
    REJECTIONS,
    TABLES,
    near_quota_rows,
    otel_name,
)
from ._guard import never_raise
from ._labels import ScopeLabeler, resolve_key
from ._rejections import Rejections
from ._table_state import TableState, gauge_values, ignored_by_tool

with requires("otel", "The OpenTelemetry bridge (mcp_cancellation.telemetry.otel)"):
    from opentelemetry import metrics, trace
    from opentelemetry.metrics import CallbackOptions, Observation


if TYPE_CHECKING:
    from ..registry import CancellationRegistry

__all__ = [
    "ATTRIBUTES",
    "CLEANUP_BUCKETS",
    "EVENT_CANCEL",
    "EVENT_EVICT",
    "EVENT_REJECTED",
    "INSTRUMENTATION_NAME",
    "METER_INSTRUMENTS",
    "SPAN_NAMES",
    "OpenTelemetryBridge",
    "instrument",
    "instrumented",
    "uninstrument",
]

#: Name of the tracer and the meter (the instrumentation scope).
INSTRUMENTATION_NAME = "mcp_cancellation"

SPAN_CLEANUP = "mcp_cancellation.cleanup"
#: Every span name this bridge creates.
SPAN_NAMES = frozenset({SPAN_CLEANUP})
#: The event added to the current span for a recorded cancellation.
EVENT_CANCEL = "mcp_cancellation.cancel"
#: The event added to the current span for each scope an eviction batch took rows from.
EVENT_EVICT = "mcp_cancellation.evict"
#: The event added to the current span for a refused cancellation.
EVENT_REJECTED = "mcp_cancellation.rejected"

REQUEST_ID = "mcp_cancellation.request.id"
METHOD = "mcp.method.name"
ERROR_TYPE = "error.type"
SOURCE = "mcp_cancellation.source"
SCOPE_KIND = "mcp_cancellation.scope_kind"
SCOPE = "mcp_cancellation.scope"
REASON = "mcp_cancellation.reason"
REMOVED = "mcp_cancellation.removed"
IN_FLIGHT_REMOVED = "mcp_cancellation.in_flight_removed"
EVICTED = "mcp_cancellation.evicted"
#: Every span and event attribute this bridge sets.
ATTRIBUTES = frozenset(
    {
        REQUEST_ID,
        METHOD,
        ERROR_TYPE,
        SOURCE,
        SCOPE_KIND,
        SCOPE,
        REASON,
        REMOVED,
        IN_FLIGHT_REMOVED,
        EVICTED,
    }
)

_UNITS: Final = {
    "cancelled_total": "{cancellation}",
    "rejected_total": "{cancellation}",
    "evicted_total": "{row}",
    "cleanup_removed_total": "{row}",
    "storage_errors_total": "{error}",
    "rows": "{row}",
    "in_flight": "{row}",
    "max_rows": "{row}",
    "max_rows_per_scope": "{row}",
    "scope_rows": "{row}",
    "scopes_near_quota": "{scope}",
    "storage_up": "",
    "scope_rejections": "{cancellation}",
    "cancel_to_stop_seconds": "s",
    "cancellations_ignored_total": "{request}",
    "ignored_cancellations": "{request}",
}
#: Bucket boundaries (seconds) of the cleanup-duration histogram.
CLEANUP_BUCKETS: Final = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
_DURATION = "mcp_cancellation.cleanup.duration"

#: Meter instruments: name -> (kind, unit, attributes). The attributes are the labels of
#: the catalogue's Prometheus metric of the same name.
METER_INSTRUMENTS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    otel_name(info.name): (info.type, _UNITS[info.name.removeprefix(PREFIX)], info.labels)
    for info in ALL
}
METER_INSTRUMENTS[_DURATION] = ("histogram", "s", ())

_NOTIFICATION = "notifications/cancelled"
#: The histogram's attribute mappings, built once.
_STOP_ATTRIBUTES: Final = {
    (kind, outcome): {"scope_kind": kind, "outcome": outcome}
    for kind in SCOPE_KINDS
    for outcome in OUTCOMES
}
#: How long one collection's table state is reused by the other gauges' callbacks.
_STATE_REUSE = 0.5


def _source(method: str | None) -> str:
    if method is None:
        return "api"
    if method == _NOTIFICATION:
        return "notification"
    if method == "disconnect":
        return "disconnect"
    return "other"


class _Tally:
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


class _Instruments:
    """The counters and the histogram of one meter (a provider hands out one instrument
    per name, so bridges on one meter share them and their counts add up)."""

    def __init__(self, meter: metrics.Meter) -> None:
        def counter(name: str) -> Any:
            info = METRICS[PREFIX + name + "_total"]
            return meter.create_counter(otel_name(info.name), _UNITS[name + "_total"], info.help)

        def tally(name: str, combinations: Iterable[tuple[str, ...]]) -> _Tally:
            info = METRICS[PREFIX + name + "_total"]
            found = _Tally(info.labels, combinations)
            meter.create_observable_counter(
                otel_name(info.name), [found.observe], _UNITS[name + "_total"], info.help
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
        self.removed = counter("cleanup_removed")
        self.storage_errors = counter("storage_errors")
        self.duration = meter.create_histogram(
            _DURATION,
            "s",
            "Duration of cleanup passes.",
            explicit_bucket_boundaries_advisory=list(CLEANUP_BUCKETS),
        )

    def zero(self, storage: str | None) -> None:
        """Every label combination of the synchronous counters at 0 (the tallies start
        so), so that rate() sees the first event."""
        for table in TABLES:
            self.removed.add(0, {"table": table})
        if storage is not None:
            for operation in STORAGE_OPERATIONS:
                self.storage_errors.add(0, {"storage": storage, "operation": operation})


class OpenTelemetryBridge(Bridge):
    """Spans and metrics for the signals of one registry (or of all, with ``None``).

    Providers default to the global ones (through OpenTelemetry's proxies, so a provider
    set later is used). :meth:`install` and :meth:`uninstall` are idempotent. Prefer
    :func:`instrument`, which keeps one bridge per registry. Bridges sharing a meter
    provider share its instruments: their counters add up, and each registry's gauges
    are observed with its own ``storage`` label. *top_k* and *heavy_hitters_capacity*
    bound the ``scope`` series as in the Prometheus bridge; *stats_timeout* bounds each
    collection's read of the storage.
    """

    def __init__(
        self,
        registry: CancellationRegistry | None = None,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        hash_key: str | bytes | None = None,
        top_k: int = 20,
        heavy_hitters_capacity: int | None = None,
        stats_timeout: float = 2.0,
    ) -> None:
        super().__init__(registry)
        self._providers = (tracer_provider, meter_provider)
        self.tracer = trace.get_tracer(INSTRUMENTATION_NAME, __version__, tracer_provider)
        meter = metrics.get_meter(INSTRUMENTATION_NAME, __version__, meter_provider)
        self.labeler = ScopeLabeler(hash_key)
        self.top_k = top_k
        self.stats_timeout = stats_timeout
        self.rejections = Rejections(top_k, heavy_hitters_capacity or 10 * top_k, self.labeler)
        self._instruments = _instruments(meter)
        self._storage = registry.storage.identity if registry is not None else None
        self._state: tuple[float, TableState | None] = (-1.0, None)
        self._state_lock = threading.Lock()
        if registry is not None:
            for info in ALL:
                if info.type == "gauge":
                    _join_gauge(meter, info.name, self)

    def _receivers(self) -> Receivers:
        return [
            (signals.request_cancelled, self._on_cancelled),
            (signals.request_stopped, self._on_stopped),
            (signals.cancellation_cleanup, self._on_cleanup),
            (signals.cancellation_evicted, self._on_evicted),
            (signals.cancellation_rejected, self._on_rejected),
            (signals.storage_error, self._on_storage_error),
        ]

    def _attach(self) -> None:
        self._instruments.zero(self._storage)
        registry = self.registry
        if registry is not None:
            _bridged.add(registry)

    def _detach(self) -> None:
        registry = self.registry
        if registry is not None:
            _bridged.discard(registry)

    def _elsewhere(self, sender: object) -> bool:
        """Whether *sender* has a bridge of its own, so that this bridge for every registry
        (``opentelemetry-instrument``) leaves its signals to that one: recorded once."""
        return self._registry_ref is None and sender in _bridged

    # -- observable gauges -------------------------------------------------------------

    def table_state(self) -> TableState | None:
        """What this collection's gauges show (``None`` when not installed or the
        registry is gone); read once and reused by the other gauges of the collection."""
        registry = self.registry
        if registry is None or not self.installed:
            return None
        with self._state_lock:
            taken, state = self._state
            now = time.monotonic()
            if state is not None and now - taken < _STATE_REUSE:
                return state
            storage = registry.storage
            near = near_quota_rows(registry.max_rows_per_scope)
            summary = storage.summary_from_thread(self.top_k, self.stats_timeout, near)
            state = TableState(
                storage=storage.identity,
                up=storage.available,
                max_rows=registry.max_rows,
                max_rows_per_scope=registry.max_rows_per_scope,
                summary=summary,
                rejections=self.rejections.select(),
                top_k=self.top_k,
                labeler=self.labeler,
                ignored=ignored_by_tool(registry),
            )
            self._state = (now, state)
            return state

    # -- receivers ---------------------------------------------------------------------

    @never_raise
    def _on_cancelled(
        self,
        sender: object,
        *,
        request_id: str,
        scope: str,
        reason: str | None = None,
        method: str | None = None,
        **_: object,
    ) -> None:
        if self._elsewhere(sender):
            return
        kind = scope_kind(scope)
        span = trace.get_current_span()
        if span.is_recording():
            source = _source(method)
            attributes: dict[str, str] = {
                REQUEST_ID: request_id,
                SOURCE: source,
                SCOPE_KIND: kind,
                SCOPE: self.labeler(scope),
            }
            if method is not None and source != "disconnect":
                attributes[METHOD] = method
            if reason is not None:
                attributes[REASON] = reason
            span.add_event(EVENT_CANCEL, attributes)
        self._instruments.cancelled.add((kind,))

    @never_raise
    def _on_stopped(  # the keywords of signals.request_stopped
        self,
        sender: object,
        *,
        scope: str,
        outcome: str,
        seconds: float,
        tool: str | None,
        ignored: bool,
        **_: object,
    ) -> None:
        if self._elsewhere(sender):
            return
        kind = scope_kind(scope)
        attributes = _STOP_ATTRIBUTES.get((kind, outcome))
        if attributes is None:
            attributes = {"scope_kind": kind, "outcome": outcome}
        self._instruments.stop.record(seconds, attributes)
        if ignored:
            self._instruments.ignored.add((tool or OTHER_TOOL,))

    @never_raise
    def _on_cleanup(
        self,
        sender: object,
        *,
        removed: int,
        in_flight_removed: int,
        duration: float | None = None,
        start_time_ns: int | None = None,
        **_: object,
    ) -> None:
        if self._elsewhere(sender):
            return
        attributes = {REMOVED: removed, IN_FLIGHT_REMOVED: in_flight_removed}
        if start_time_ns is not None and duration is not None:
            end = start_time_ns + max(0, round(duration * 1e9))
            span = self.tracer.start_span(
                SPAN_CLEANUP, attributes=attributes, start_time=start_time_ns
            )
            span.end(end_time=end)
        else:
            self.tracer.start_span(SPAN_CLEANUP, attributes=attributes).end()
        if removed:
            self._instruments.removed.add(removed, {"table": "cancellations"})
        if in_flight_removed:
            self._instruments.removed.add(in_flight_removed, {"table": "in_flight"})
        if duration is not None:
            self._instruments.duration.record(duration)

    @never_raise
    def _on_evicted(self, sender: object, *, scope: str, count: int, **_: object) -> None:
        if self._elsewhere(sender):
            return
        kind = scope_kind(scope)
        span = trace.get_current_span()
        if span.is_recording():
            attributes: dict[str, str | int] = {
                SCOPE_KIND: kind,
                SCOPE: self.labeler(scope),
                EVICTED: count,
            }
            span.add_event(EVENT_EVICT, attributes)
        self._instruments.evicted.add((kind,), count)

    @never_raise
    def _on_rejected(
        self, sender: object, *, scope: str, reason: str, mode: str = "enforce", **_: object
    ) -> None:
        if self._elsewhere(sender):
            return
        kind = scope_kind(scope)
        if mode != "enforce":  # shadow mode: counted, nobody was refused
            self._instruments.rejected.add((kind, reason, mode))
            return
        span = trace.get_current_span()
        if span.is_recording():
            span.add_event(
                EVENT_REJECTED,
                {ERROR_TYPE: reason, SCOPE_KIND: kind, SCOPE: self.labeler(scope)},
            )
        self._instruments.rejected.add((kind, reason, mode))
        if self._registry_ref is not None:
            self.rejections.add(scope, reason)

    @never_raise
    def _on_storage_error(self, sender: object, *, operation: str, **_: object) -> None:
        if self._registry_ref is None and any(r.storage is sender for r in list(_bridged)):
            return  # that registry's own bridge counts it
        storage = sender.identity if isinstance(sender, Storage) else "unknown"
        attributes = {"storage": storage, "operation": operation}
        self._instruments.storage_errors.add(1, attributes)


#: Registries that have a bridge of their own (see OpenTelemetryBridge._elsewhere).
_bridged: weakref.WeakSet[Any] = weakref.WeakSet()

_instruments_lock = threading.Lock()
_by_meter: weakref.WeakKeyDictionary[Any, _Instruments] = weakref.WeakKeyDictionary()


def _instruments(meter: metrics.Meter) -> _Instruments:
    with _instruments_lock:
        found = _by_meter.get(meter)
        if found is None:
            found = _by_meter[meter] = _Instruments(meter)
        return found


class _GaugeMembers:
    """The bridges observed by one observable gauge (one per meter and catalogue gauge).

    A meter provider hands out one instrument per name, keeping the first callback, so
    bridges of several registries on one provider join the first one's member set; each
    observes its own table, with its own ``storage`` label.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.labels = METRICS[name].labels
        self.bridges: weakref.WeakSet[OpenTelemetryBridge] = weakref.WeakSet()

    def observe(self, options: CallbackOptions) -> list[Observation]:
        observations: list[Observation] = []
        for bridge in list(self.bridges):
            state = bridge.table_state()
            if state is None:
                continue
            for name, points in gauge_values(state):
                if name == self.name:
                    for values, value in points:
                        attributes = dict(zip(self.labels, values, strict=True))
                        observations.append(Observation(value, attributes))
        return observations


_gauges: weakref.WeakKeyDictionary[Any, _GaugeMembers] = weakref.WeakKeyDictionary()
_gauges_lock = threading.Lock()


def _join_gauge(meter: metrics.Meter, name: str, bridge: OpenTelemetryBridge) -> None:
    with _gauges_lock:
        members = _GaugeMembers(name)
        instrument = meter.create_observable_gauge(
            otel_name(name),
            [members.observe],
            _UNITS[name.removeprefix(PREFIX)],
            METRICS[name].help,
        )
        members = _gauges.setdefault(instrument, members)
        members.bridges.add(bridge)


# -- module-level instrumentation --------------------------------------------------------

_setups: Setups[OpenTelemetryBridge] = Setups()


def instrument(
    registry: CancellationRegistry | None = None,
    *,
    tracer_provider: trace.TracerProvider | None = None,
    meter_provider: metrics.MeterProvider | None = None,
    hash_key: str | bytes | None = None,
) -> OpenTelemetryBridge:
    """Record the signals of *registry* (of every registry when ``None``) as spans and
    metrics. Idempotent: while instrumented, calling it again for the same registry (or
    for ``None``) returns the existing bridge; naming another provider or hash key than
    it uses raises :class:`~mcp_cancellation.ConfigurationError` (as ``metrics_app()``)."""
    from ..registry import CancellationRegistry

    if registry is not None and not isinstance(registry, CancellationRegistry):
        raise TypeError(
            f"registry must be a CancellationRegistry or None, not {type(registry).__name__}"
            " (pass providers as keywords)"
        )

    def conflict(bridge: OpenTelemetryBridge) -> str | None:
        wanted = (tracer_provider, meter_provider)
        for name, given, used in zip(("tracer", "meter"), wanted, bridge._providers, strict=True):
            if given is not None and given is not used:
                return f"instrument() for this registry uses another {name}_provider"
        if hash_key is not None and bridge.labeler.key != resolve_key(hash_key):
            return "instrument() for this registry uses another hash_key"
        return None

    def make() -> OpenTelemetryBridge:
        return OpenTelemetryBridge(
            registry,
            tracer_provider=tracer_provider,
            meter_provider=meter_provider,
            hash_key=hash_key,
        )

    return _setups.get_or_install(registry, None, conflict, make)


def uninstrument(registry: CancellationRegistry | None = None) -> None:
    """Stop recording: for *registry* only, or (with ``None``) everything
    :func:`instrument` set up. Idempotent."""
    for bridge in _setups.remove(registry):
        bridge.uninstall()


def instrumented(registry: CancellationRegistry | None = None) -> bool:
    """Whether :func:`instrument` is in effect for *registry* (or globally, for ``None``)."""
    return bool(_setups.find(registry))
