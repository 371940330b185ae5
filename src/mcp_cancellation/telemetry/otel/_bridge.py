"""The OpenTelemetry bridge: :class:`OpenTelemetryBridge` and the module-level
:func:`instrument` / :func:`uninstrument` (see :mod:`mcp_cancellation.telemetry.otel`)."""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from opentelemetry import metrics, trace

from ...__about__ import __version__
from ...scope import SCOPE_KINDS, ScopeKind, ScopeLabeler, resolve_key, scope_kind
from ...storage._base import Storage
from .._bridge import Bridge, Setups
from .._catalogue import (
    ALL,
    OPERATION_LABELS,
    OUTCOMES,
    TASK_QUOTA,
    near_quota_rows,
)
from .._guard import never_raise
from .._rejections import Rejections
from .._table_state import TableState, ignored_by_tool
from ._instruments import instruments, join_gauge
from ._names import (
    ERROR_TYPE,
    EVENT_CANCEL,
    EVENT_EVICT,
    EVENT_REJECTED,
    EVICTED,
    IN_FLIGHT_REMOVED,
    INSTRUMENTATION_NAME,
    METHOD,
    REASON,
    REMOVED,
    REQUEST_ID,
    SCOPE,
    SCOPE_KIND,
    SOURCE,
    SPAN_CANCEL,
    SPAN_CLEANUP,
    SPAN_TASK,
    TASK_ID,
    TASK_STATUS,
    TOOL_NAME,
)

if TYPE_CHECKING:
    from ..._registry import CancellationRegistry

__all__ = ["EVICT_EVENTS", "OpenTelemetryBridge", "instrument", "instrumented", "uninstrument"]

_NOTIFICATION = "notifications/cancelled"
#: The histogram's attribute mappings, built once.
_STOP_ATTRIBUTES: Final = {
    (kind, outcome): {"scope_kind": kind, "outcome": outcome}
    for kind in SCOPE_KINDS
    for outcome in OUTCOMES
}
#: The most creating requests' span contexts kept for the links of running tasks' spans.
_MAX_LINKS = 10_000
#: How long one collection's table state is reused by the other gauges' callbacks.
_STATE_REUSE = 0.5
#: The ``mcp_cancellation.evict`` events one eviction batch adds to the current span: one
#: per evicted scope, for this many of its largest scopes (``evicted`` counts every row).
EVICT_EVENTS: Final = 16


def _source(method: str | None) -> str:
    if method is None:
        return "api"
    if method == _NOTIFICATION:
        return "notification"
    if method == "disconnect":
        return "disconnect"
    if method == "operator":
        return "operator"
    return "other"


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
        self._instruments = instruments(meter)
        self._storage = registry.storage.identity if registry is not None else None
        self._state: tuple[float, TableState | None] = (-1.0, None)
        self._state_lock = threading.Lock()
        # The span context of each task's creating request, until the task ends.
        self._links: dict[str, trace.SpanContext] = {}
        self._links_lock = threading.Lock()
        if registry is not None:
            for info in ALL:
                if info.type == "gauge":
                    join_gauge(meter, info.name, self)

    def _attach(self) -> None:
        self._instruments.zero(self._storage)
        registry = self.registry
        if registry is not None:
            _bridged.add(registry)

    def _detach(self) -> None:
        registry = self.registry
        if registry is not None:
            _bridged.discard(registry)

    def _skips(self, sender: object) -> bool:
        return self._elsewhere(sender)

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
        recording = span.is_recording()
        # A cancellation the middleware received (a notification it answered itself, a
        # closed stream, an operator) may have no server span around it: the ASGI
        # instrumentation's sits inside the middleware. It then gets a span of its own.
        # A closed stream and an operator's cancellation always do (a child of the
        # current span, if any): whether a span is current there depends on the response
        # mode (a closed SSE stream is seen inside the app's span, a closed JSON one
        # outside it) and on the worker, and they must look the same either way.
        if recording or method is not None:
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
            if recording and source not in ("disconnect", "operator"):
                span.add_event(EVENT_CANCEL, attributes)
            else:
                self.tracer.start_span(SPAN_CANCEL, attributes=attributes).end()
        self._instruments.cancelled.add((kind,))
        if method == "operator":
            self._instruments.operator.add(1, {"scope_kind": kind})

    def _ended(self, labels: tuple[str, ...], seconds: float) -> None:
        attributes = {
            name: value for name, value in zip(OPERATION_LABELS, labels, strict=True) if value
        }
        self._instruments.operations.record(seconds, attributes)
        error_type = labels[2]
        if error_type:
            span = trace.get_current_span()  # the server span of the call, if one is active
            if span.is_recording():
                span.set_attribute("error.type", error_type)

    def _stopped(self, kind: ScopeKind, outcome: str, seconds: float, ignoring: str | None) -> None:
        attributes = _STOP_ATTRIBUTES.get((kind, outcome))
        if attributes is None:
            attributes = {"scope_kind": kind, "outcome": outcome}
        self._instruments.stop.record(seconds, attributes)
        if ignoring is not None:
            self._instruments.ignored.add((ignoring,))

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
        if not (removed or in_flight_removed):
            pass  # a pass that removed nothing is no trace worth keeping (its duration is)
        elif start_time_ns is not None and duration is not None:
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
    def _on_evicted(
        self,
        sender: object,
        *,
        evicted: Sequence[tuple[str, int]],
        kinds: Mapping[str, int],
        **_: object,
    ) -> None:
        # Once per evicting insert, however many scopes it evicted (a flood: thousands).
        if self._elsewhere(sender):
            return
        span = trace.get_current_span()
        if span.is_recording():
            # An event for each of the largest scopes only: more would say little, and
            # would crowd the span's own events out of its limit (128 by default).
            for scope, count in evicted[:EVICT_EVENTS]:
                attributes: dict[str, str | int] = {
                    SCOPE_KIND: scope_kind(scope),
                    SCOPE: self.labeler(scope),
                    EVICTED: count,
                }
                span.add_event(EVENT_EVICT, attributes)
        add = self._instruments.evicted.add
        for kind, rows in kinds.items():
            add((kind,), rows)

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

    def _task_created(self, task_id: str, tool: str) -> None:
        self._instruments.tasks_created.add((tool,))
        span = trace.get_current_span()  # the request that created the task, if traced
        context = span.get_span_context()
        if context.is_valid:
            with self._links_lock:
                self._links[task_id] = context
                while len(self._links) > _MAX_LINKS:
                    self._links.pop(next(iter(self._links)))

    def _task_ended(self, task_id: str, tool: str, status: str, seconds: float) -> None:
        self._instruments.tasks_ended.add((tool, status))
        self._instruments.task_seconds.record(seconds, {"tool": tool, "status": status})
        with self._links_lock:
            context = self._links.pop(task_id, None)
        end = time.time_ns()
        span = self.tracer.start_span(
            SPAN_TASK,
            attributes={TASK_ID: task_id, TASK_STATUS: status, TOOL_NAME: tool},
            links=[trace.Link(context)] if context is not None else None,
            start_time=end - max(0, round(seconds * 1e9)),
        )
        if status == "failed":
            span.set_attribute(ERROR_TYPE, "task_failed")
        span.end(end_time=end)

    def _task_rejected(self, scope: str, reason: str) -> None:
        self._instruments.tasks_rejected.add((scope_kind(scope), reason))
        if reason == "quota" and self._registry_ref is not None:
            self.rejections.add(scope, TASK_QUOTA)

    @never_raise
    def _on_storage_error(self, sender: object, *, operation: str, **_: object) -> None:
        if self._registry_ref is None and any(r.storage is sender for r in list(_bridged)):
            return  # that registry's own bridge counts it
        storage = sender.identity if isinstance(sender, Storage) else "unknown"
        attributes = {"storage": storage, "operation": operation}
        self._instruments.storage_errors.add(1, attributes)


#: Registries that have a bridge of their own (see OpenTelemetryBridge._elsewhere).
_bridged: weakref.WeakSet[Any] = weakref.WeakSet()

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
    from ..._registry import CancellationRegistry

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
