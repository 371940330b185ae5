"""OpenTelemetry bridge: the registry's signals as spans and meter counters.

:func:`instrument` connects to :mod:`mcp_cancellation.signals`; :func:`uninstrument`
disconnects. Signals are sent synchronously by the task that called the registry, so the
*current* span is the caller's and every span below is its child: the HTTP server span of
a ``notifications/cancelled`` POST (the middleware answers it in front of the SDK), the
SDK's request span for ``registry.cancel()`` from tool code, no parent for the janitor.

Spans (tracer ``mcp_cancellation``, the package version):

``mcp.cancellation.cancel``
    a recorded cancellation (instantaneous: it is created when the row was written):
    ``jsonrpc.request.id``, ``mcp.method.name`` (``notifications/cancelled`` when it came
    from one; absent for a disconnect or a library call), ``mcp.cancellation.source``
    (``notification``, ``disconnect``, ``api`` or ``other``), ``mcp.cancellation.scope_kind``,
    ``mcp.cancellation.scope`` (session scopes hashed), ``mcp.cancellation.reason`` (when
    given; already sanitised and truncated by the registry).
``mcp.cancellation.cleanup``
    one cleanup pass, starting and ending when the pass did: ``mcp.cancellation.removed``,
    ``mcp.cancellation.in_flight_removed``.
``mcp.cancellation.evict``
    the global cap evicted rows of one scope: ``mcp.cancellation.scope_kind``,
    ``mcp.cancellation.scope``, ``mcp.cancellation.evicted``.
``mcp.cancellation.reject``
    a refused cancellation, status ERROR: ``mcp.cancellation.scope_kind``,
    ``mcp.cancellation.scope``, ``mcp.cancellation.rejection.reason`` (``quota`` or
    ``invalid_request_id``), ``jsonrpc.request.id`` (valid ids only).

Evictions and rejections are spans rather than events so that they are recorded even when
nothing else is being traced. Counters (meter ``mcp_cancellation``) mirror the Prometheus
ones: ``mcp.cancellation.cancelled``, ``mcp.cancellation.rejected``,
``mcp.cancellation.evicted``, ``mcp.cancellation.cleanup.removed``, plus the histogram
``mcp.cancellation.cleanup.duration`` (seconds) and, when one registry is instrumented and
its storage can be read synchronously (memory), the observable gauges
``mcp.cancellation.rows`` and ``mcp.cancellation.in_flight``. See ``docs/metrics.md``.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .. import signals
from ..__about__ import __version__
from .._extras import requires
from ..scope import SCOPE_KINDS, scope_kind
from ..storage.base import StorageStats
from ._bridge import Bridge, Receivers, Setups
from ._guard import never_raise
from ._labels import ScopeLabeler, resolve_key

with requires("otel", "The OpenTelemetry bridge (mcp_cancellation.telemetry.otel)"):
    from opentelemetry import metrics, trace
    from opentelemetry.metrics import CallbackOptions, Observation
    from opentelemetry.trace import Status, StatusCode


if TYPE_CHECKING:
    from ..registry import CancellationRegistry

__all__ = [
    "ATTRIBUTES",
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

SPAN_CANCEL = "mcp.cancellation.cancel"
SPAN_CLEANUP = "mcp.cancellation.cleanup"
SPAN_EVICT = "mcp.cancellation.evict"
SPAN_REJECT = "mcp.cancellation.reject"
#: Every span name this bridge creates.
SPAN_NAMES = frozenset({SPAN_CANCEL, SPAN_CLEANUP, SPAN_EVICT, SPAN_REJECT})

REQUEST_ID = "jsonrpc.request.id"
METHOD = "mcp.method.name"
SOURCE = "mcp.cancellation.source"
SCOPE_KIND = "mcp.cancellation.scope_kind"
SCOPE = "mcp.cancellation.scope"
REASON = "mcp.cancellation.reason"
REMOVED = "mcp.cancellation.removed"
IN_FLIGHT_REMOVED = "mcp.cancellation.in_flight_removed"
EVICTED = "mcp.cancellation.evicted"
REJECTION_REASON = "mcp.cancellation.rejection.reason"
TABLE = "mcp.cancellation.table"
#: Every span (and metric point) attribute this bridge sets.
ATTRIBUTES = frozenset(
    {
        REQUEST_ID,
        METHOD,
        SOURCE,
        SCOPE_KIND,
        SCOPE,
        REASON,
        REMOVED,
        IN_FLIGHT_REMOVED,
        EVICTED,
        REJECTION_REASON,
        TABLE,
    }
)

#: Meter instruments: name -> (kind, unit, attributes).
METER_INSTRUMENTS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "mcp.cancellation.cancelled": ("counter", "{cancellation}", (SCOPE_KIND, SOURCE)),
    "mcp.cancellation.rejected": ("counter", "{cancellation}", (SCOPE_KIND, REJECTION_REASON)),
    "mcp.cancellation.evicted": ("counter", "{row}", (SCOPE_KIND,)),
    "mcp.cancellation.cleanup.removed": ("counter", "{row}", (TABLE,)),
    "mcp.cancellation.cleanup.duration": ("histogram", "s", ()),
    "mcp.cancellation.rows": ("gauge", "{row}", (SCOPE_KIND,)),
    "mcp.cancellation.in_flight": ("gauge", "{row}", (SCOPE_KIND,)),
}

_NOTIFICATION = "notifications/cancelled"


def _source(method: str | None) -> str:
    if method is None:
        return "api"
    if method == _NOTIFICATION:
        return "notification"
    if method == "disconnect":
        return "disconnect"
    return "other"


class OpenTelemetryBridge(Bridge):
    """Spans and counters for the signals of one registry (or of all, with ``None``).

    Providers default to the global ones (through OpenTelemetry's proxies, so a provider
    set later is used). :meth:`install` and :meth:`uninstall` are idempotent. Prefer
    :func:`instrument`, which keeps one bridge per registry. Bridges sharing a meter
    provider share its instruments: their counters and row gauges add up.
    """

    def __init__(
        self,
        registry: CancellationRegistry | None = None,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        hash_key: str | bytes | None = None,
    ) -> None:
        super().__init__(registry)
        self._providers = (tracer_provider, meter_provider)
        self.tracer = trace.get_tracer(INSTRUMENTATION_NAME, __version__, tracer_provider)
        meter = metrics.get_meter(INSTRUMENTATION_NAME, __version__, meter_provider)
        self.labeler = ScopeLabeler(hash_key)
        self._cancelled = meter.create_counter(
            "mcp.cancellation.cancelled", "{cancellation}", "Cancellations recorded."
        )
        self._rejected = meter.create_counter(
            "mcp.cancellation.rejected", "{cancellation}", "Cancellations refused."
        )
        self._evicted = meter.create_counter(
            "mcp.cancellation.evicted", "{row}", "Rows evicted by the global cap."
        )
        self._removed = meter.create_counter(
            "mcp.cancellation.cleanup.removed", "{row}", "Rows removed by cleanup passes."
        )
        self._duration = meter.create_histogram(
            "mcp.cancellation.cleanup.duration", "s", "Duration of cleanup passes."
        )
        if registry is not None:
            # Row gauges need the storage's state: read synchronously when the storage
            # allows it (MemoryStorage), else not observed.
            for table in ("rows", "in_flight"):
                _join_gauge(meter, table, self)

    def _receivers(self) -> Receivers:
        return [
            (signals.request_cancelled, self._on_cancelled),
            (signals.cancellation_cleanup, self._on_cleanup),
            (signals.cancellation_evicted, self._on_evicted),
            (signals.cancellation_rejected, self._on_rejected),
        ]

    # -- observable gauges -------------------------------------------------------------

    def _stats(self) -> StorageStats | None:
        registry = self.registry
        if registry is None or not self.installed:
            return None
        return registry.storage.stats_nowait()

    def _counts(self, table: str) -> Mapping[str, int] | None:
        """Rows (or in-flight rows) per scope, if installed and readable synchronously."""
        stats = self._stats()
        return None if stats is None else getattr(stats, table)

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
        kind = scope_kind(scope)
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
        self.tracer.start_span(SPAN_CANCEL, attributes=attributes).end()
        self._cancelled.add(1, {SCOPE_KIND: kind, SOURCE: source})

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
            self._removed.add(removed, {TABLE: "cancellations"})
        if in_flight_removed:
            self._removed.add(in_flight_removed, {TABLE: "in_flight"})
        if duration is not None:
            self._duration.record(duration)

    @never_raise
    def _on_evicted(self, sender: object, *, scope: str, count: int, **_: object) -> None:
        kind = scope_kind(scope)
        attributes: dict[str, str | int] = {
            SCOPE_KIND: kind,
            SCOPE: self.labeler(scope),
            EVICTED: count,
        }
        self.tracer.start_span(SPAN_EVICT, attributes=attributes).end()
        self._evicted.add(count, {SCOPE_KIND: kind})

    @never_raise
    def _on_rejected(
        self,
        sender: object,
        *,
        scope: str,
        reason: str,
        request_id: str | None = None,
        **_: object,
    ) -> None:
        kind = scope_kind(scope)
        attributes: dict[str, str] = {
            SCOPE_KIND: kind,
            SCOPE: self.labeler(scope),
            REJECTION_REASON: reason,
        }
        if request_id is not None:
            attributes[REQUEST_ID] = request_id
        span = self.tracer.start_span(SPAN_REJECT, attributes=attributes)
        span.set_status(Status(StatusCode.ERROR, reason))
        span.end()
        self._rejected.add(1, {SCOPE_KIND: kind, REJECTION_REASON: reason})


class _GaugeMembers:
    """The bridges observed by one observable gauge (one per meter and table).

    A meter provider hands out one instrument per name, keeping the first callback, so
    bridges of several registries on one provider join the first one's member set and
    their rows add up, as their counters do.
    """

    def __init__(self, table: str) -> None:
        self.table = table
        self.bridges: weakref.WeakSet[OpenTelemetryBridge] = weakref.WeakSet()

    def observe(self, options: CallbackOptions) -> list[Observation]:
        by_kind = dict.fromkeys(SCOPE_KINDS, 0)
        seen = False
        for bridge in list(self.bridges):
            counts = bridge._counts(self.table)
            if counts is None:
                continue
            seen = True
            for scope, count in counts.items():
                by_kind[scope_kind(scope)] += count
        if not seen:
            return []
        return [Observation(count, {SCOPE_KIND: kind}) for kind, count in by_kind.items()]


_GAUGE_HELP = {"rows": "Cancellation rows, by scope kind.", "in_flight": "In-flight request rows."}
_gauges: weakref.WeakKeyDictionary[Any, _GaugeMembers] = weakref.WeakKeyDictionary()
_gauges_lock = threading.Lock()


def _join_gauge(meter: metrics.Meter, table: str, bridge: OpenTelemetryBridge) -> None:
    with _gauges_lock:
        members = _GaugeMembers(table)
        instrument = meter.create_observable_gauge(
            f"mcp.cancellation.{table}", [members.observe], "{row}", _GAUGE_HELP[table]
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
