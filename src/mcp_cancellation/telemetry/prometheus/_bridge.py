"""``PrometheusBridge``: signal counters, and the state its scrape-time collector reads."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import math
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from ..._errors import ConfigurationError
from ..._extras import requires
from ..._token import OTHER_TOOL
from ...scope import SCOPE_KINDS, ScopeKind, ScopeLabeler, scope_kind
from ...storage._base import STORAGE_OPERATIONS, TableSummary
from .._bridge import Bridge
from .._catalogue import (
    OPERATION_BUCKETS,
    OPERATION_DURATION,
    OPERATION_LABELS,
    TASK_BUCKETS,
    TASK_QUOTA,
    TASK_REJECT_REASONS,
    TASK_STATUSES,
    near_quota_rows,
)
from .._guard import never_raise
from .._rejections import REJECTIONS_WINDOW, Rejections
from .._table_state import ignored_by_tool
from ._catalogue import CANCEL_TO_STOP_BUCKETS, METRICS, OUTCOMES, PREFIX, REJECTIONS, TABLES
from ._collector import GaugeState, StateCollector
from ._multiprocess import MULTIPROC_ENV, HitterFiles, check_multiprocess
from ._tally import KindChildren, KindCounter, KindTally

with requires("prometheus", "The Prometheus bridge (mcp_cancellation.telemetry.prometheus)"):
    from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
    from prometheus_client.exposition import choose_encoder
    from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from ..._registry import CancellationRegistry

__all__ = ["REJECTIONS_WINDOW", "PrometheusBridge"]

logger = logging.getLogger("mcp_cancellation.telemetry")

_ONE_PER_COLLECTOR_REGISTRY: Final = (
    "another PrometheusBridge is installed on this CollectorRegistry "
    "(use one CollectorRegistry per CancellationRegistry)"
)

# The snapshot render() awaited for the scrape being rendered in this task.
_pending: contextvars.ContextVar[tuple[PrometheusBridge, TableSummary | None] | None] = (
    contextvars.ContextVar("mcp_cancellation_pending_stats", default=None)
)


def _counter(name: str) -> Counter:
    """The ``prometheus_client`` counter ``<name>_total``, as the catalogue describes it
    (registered by the bridge, in its own collector registry)."""
    info = METRICS[PREFIX + name + "_total"]
    return Counter(PREFIX + name, info.help, list(info.labels), registry=None)


class PrometheusBridge(Bridge):
    """Exports one :class:`~mcp_cancellation.CancellationRegistry` to Prometheus.

    :meth:`install` registers the counters and the scrape-time collector in
    *collector_registry* and connects to the registry's signals (only that registry's: the
    sender is filtered); :meth:`uninstall` undoes both. Both are idempotent. One bridge
    per collector registry: the metric names are fixed, so a second registry needs its
    own ``CollectorRegistry``.

    *top_k* bounds the ``scope`` series of each per-scope gauge; the heavy-hitters
    structure keeps ``heavy_hitters_capacity`` counters (default ``10 * top_k``), so a scope
    with more than ``1/capacity`` of all rejections is always among them, and
    ``scope_rejections`` exports at most *top_k* of them, at most *top_k* new ones per
    :data:`REJECTIONS_WINDOW` seconds (see :mod:`.._stable_top`). *hash_key* keys the
    session-scope digests (see ``docs/metrics.md``). *multiprocess_dir* defaults to
    ``$PROMETHEUS_MULTIPROC_DIR``. *stats_timeout* bounds the storage read of each
    :meth:`render`: a storage that does not answer in time is reported down
    (``storage_up`` 0) and its row gauges are left out, so ``/metrics`` still answers.
    """

    def __init__(
        self,
        registry: CancellationRegistry,
        *,
        collector_registry: CollectorRegistry | None = REGISTRY,
        top_k: int = 20,
        heavy_hitters_capacity: int | None = None,
        hash_key: str | bytes | None = None,
        multiprocess_dir: str | None = None,
        stats_timeout: float = 2.0,
    ) -> None:
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise ConfigurationError(f"top_k must be a positive integer, not {top_k!r}")
        capacity = heavy_hitters_capacity if heavy_hitters_capacity is not None else 10 * top_k
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < top_k:
            raise ConfigurationError(
                f"heavy_hitters_capacity must be an integer >= top_k, not {capacity!r}"
            )
        if not isinstance(stats_timeout, int | float) or not 0 < stats_timeout < math.inf:
            raise ConfigurationError(f"stats_timeout must be > 0 seconds, not {stats_timeout!r}")
        super().__init__(registry)
        self.stats_timeout = float(stats_timeout)
        self._probe_ok: bool | None = None
        self._storage = registry.storage.identity
        self.collector_registry = collector_registry
        self.top_k = top_k
        self.labeler = ScopeLabeler(hash_key)
        self.rejections = Rejections(top_k, capacity, self.labeler)
        self.hitters = self.rejections.hitters
        directory = multiprocess_dir or os.environ.get(MULTIPROC_ENV) or None
        if directory is not None:
            check_multiprocess(directory)
        self.multiprocess_dir = directory
        self._files = HitterFiles(directory, self.hitters) if directory else None
        self._collector = StateCollector(self)
        self._snapshot: TableSummary | None = None
        self._counters: list[Collector] = []
        self._cancelled: KindCounter | None = None
        self._rejected: dict[tuple[str, str, str], Counter] = {}
        self._evicted: KindCounter | None = None
        self._cleanup: dict[str, Counter] = {}
        self._storage_errors: dict[str, Counter] = {}
        self._stop_seconds: dict[tuple[str, str], Histogram] = {}
        self._stop_histogram: Histogram | None = None
        self._ignored_total: Counter | None = None
        self._operations: Histogram | None = None
        self._operator: dict[str, Counter] = {}
        self._operation_children: dict[tuple[str, ...], Histogram] = {}
        self._tasks_created: Counter | None = None
        self._tasks_ended: Counter | None = None
        self._tasks_rejected: dict[tuple[str, str], Counter] = {}
        self._task_seconds: Histogram | None = None

    # -- lifecycle (install/uninstall: see telemetry._bridge) ---------------------------

    def _attach(self) -> None:
        self._make_counters()
        if self.collector_registry is not None:
            try:
                self.collector_registry.register(self._collector)
            except ValueError as exc:
                self._unregister_counters()
                raise ConfigurationError(_ONE_PER_COLLECTOR_REGISTRY) from exc
        if self._files is not None:
            self._files.start()

    def _detach(self) -> None:
        if self.collector_registry is not None:
            self.collector_registry.unregister(self._collector)
        self._unregister_counters()
        if self._files is not None:
            self._files.stop()

    def _on_registry_collected(self) -> Callable[[], None] | None:
        return self._files.close_nowait if self._files is not None else None

    def _kind_counter(self, name: str) -> tuple[Collector, KindCounter]:
        """The counter ``<name>_total{scope_kind}``, every kind from the start: a tally
        exposed by its own collector, except where prometheus_client's files must hold
        it (multiprocess mode; see _tally). Its collector, and what to count with."""
        info = METRICS[PREFIX + name + "_total"]
        if self.multiprocess_dir is None:
            tally = KindTally(info.name, info.help, info.labels[0], SCOPE_KINDS)
            return tally, tally
        counter = _counter(name)
        return counter, KindChildren(counter, SCOPE_KINDS)

    def _make_counters(self) -> None:
        reg = self.collector_registry

        rejected = _counter("rejected")
        cleanup = _counter("cleanup_removed")
        errors = _counter("storage_errors")
        self._storage_errors = {o: errors.labels(self._storage, o) for o in STORAGE_OPERATIONS}
        # Every label combination exists from the start, so rate() sees the first event.
        # The counters by scope kind alone: every recorded cancellation (the hot one), and
        # the evicted rows (an add per kind for each eviction batch).
        cancelled, self._cancelled = self._kind_counter("cancelled")
        evicted, self._evicted = self._kind_counter("evicted")
        self._rejected = {
            (k, r, m): rejected.labels(k, r, m) for k in SCOPE_KINDS for r, m in REJECTIONS
        }
        self._cleanup = {t: cleanup.labels(t) for t in TABLES}
        info = METRICS[PREFIX + "cancel_to_stop_seconds"]
        stop = Histogram(
            info.name,
            info.help,
            list(info.labels),
            registry=None,
            buckets=CANCEL_TO_STOP_BUCKETS,
        )
        # Children appear with their first observation (as in the OpenTelemetry bridge: a
        # histogram there has no point before one).
        self._stop_histogram = stop
        self._stop_seconds = {}
        operator = _counter("operator_cancelled")
        self._operator = {kind: operator.labels(kind) for kind in SCOPE_KINDS}
        ignored = self._ignored_total = _counter("cancellations_ignored")
        ignored.labels(OTHER_TOOL)  # exists from the start; registered tools with their first
        operations = self._operations = Histogram(
            OPERATION_DURATION.removesuffix("_seconds"),
            "Duration of MCP requests as the server handled them "
            "(OpenTelemetry's mcp.server.operation.duration); error_type is cancelled for a "
            "cancelled call.",
            [label.replace(".", "_") for label in OPERATION_LABELS],
            registry=None,
            unit="seconds",
            buckets=OPERATION_BUCKETS,
        )
        self._operation_children = {}
        created = self._tasks_created = _counter("tasks_created")
        ended = self._tasks_ended = _counter("tasks_ended")
        created.labels(OTHER_TOOL)
        for status in TASK_STATUSES:
            ended.labels(OTHER_TOOL, status)
        task_rejected = _counter("tasks_rejected")
        self._tasks_rejected = {
            (k, r): task_rejected.labels(k, r) for k in SCOPE_KINDS for r in TASK_REJECT_REASONS
        }
        info = METRICS[PREFIX + "task_duration_seconds"]
        self._task_seconds = Histogram(
            info.name, info.help, list(info.labels), registry=None, buckets=TASK_BUCKETS
        )
        self._counters = [
            *(cancelled, rejected, evicted, cleanup, errors, stop, ignored, operations),
            *(operator, created, ended, task_rejected, self._task_seconds),
        ]
        if reg is not None:
            done: list[Collector] = []
            try:
                for collector in self._counters:
                    reg.register(collector)
                    done.append(collector)
            except ValueError as exc:
                for collector in done:
                    reg.unregister(collector)
                self._counters = []
                raise ConfigurationError(_ONE_PER_COLLECTOR_REGISTRY) from exc

    def _unregister_counters(self) -> None:
        if self.collector_registry is not None:
            for collector in self._counters:
                self.collector_registry.unregister(collector)
        self._counters = []

    # -- signal receivers (hot path: a dict lookup and an increment each) --------------

    def _on_cancelled(
        self,
        sender: object,
        *,
        scope: str,
        request_id: object = None,
        reason: object = None,
        method: object = None,
        **_: object,
    ) -> None:
        # never_raise, inlined: this receiver runs on every recorded cancellation. The
        # signal's arguments are named, so that binding them fills no ``**_`` dict.
        try:
            kind = scope_kind(scope)
            self._cancelled.inc(kind)  # type: ignore[union-attr]
            if method == "operator":
                self._operator[kind].inc()
        except Exception:
            logger.exception("telemetry receiver %s failed", "PrometheusBridge._on_cancelled")

    @never_raise
    def _on_rejected(
        self, sender: object, *, scope: str, reason: str, mode: str = "enforce", **_: object
    ) -> None:
        child = self._rejected.get((scope_kind(scope), reason, mode))
        if child is not None:
            child.inc()
        if mode != "enforce":
            return  # shadow mode: counted, but nobody was refused
        self.rejections.add(scope, reason)
        if self._files is not None:
            self._files.mark()

    @never_raise
    def _on_evicted(self, sender: object, *, kinds: Mapping[str, int], **_: object) -> None:
        # Once per evicting insert, however many scopes it evicted (a flood: thousands).
        inc = self._evicted.inc  # type: ignore[union-attr]
        for kind, rows in kinds.items():
            inc(kind, rows)

    @never_raise
    def _on_cleanup(
        self, sender: object, *, removed: int, in_flight_removed: int, **_: object
    ) -> None:
        if removed:
            self._cleanup["cancellations"].inc(removed)
        if in_flight_removed:
            self._cleanup["in_flight"].inc(in_flight_removed)

    def _stopped(self, kind: ScopeKind, outcome: str, seconds: float, ignoring: str | None) -> None:
        key = (kind, outcome)
        child = self._stop_seconds.get(key)
        if child is None and outcome in OUTCOMES and self._stop_histogram is not None:
            child = self._stop_seconds[key] = self._stop_histogram.labels(*key)
        if child is not None:
            child.observe(seconds)
        if ignoring is not None and self._ignored_total is not None:
            self._ignored_total.labels(ignoring).inc()

    def _ended(self, labels: tuple[str, ...], seconds: float) -> None:
        child = self._operation_children.get(labels)
        if child is None:
            if self._operations is None:
                return
            child = self._operation_children[labels] = self._operations.labels(*labels)
        child.observe(seconds)

    def _task_created(self, task_id: str, tool: str) -> None:
        if self._tasks_created is not None:
            self._tasks_created.labels(tool).inc()

    def _task_ended(self, task_id: str, tool: str, status: str, seconds: float) -> None:
        if self._tasks_ended is not None and self._task_seconds is not None:
            self._tasks_ended.labels(tool, status).inc()
            self._task_seconds.labels(tool, status).observe(seconds)

    def _task_rejected(self, scope: str, reason: str) -> None:
        child = self._tasks_rejected.get((scope_kind(scope), reason))
        if child is not None:
            child.inc()
        if reason == "quota":
            self.rejections.add(scope, TASK_QUOTA)
            if self._files is not None:
                self._files.mark()

    @never_raise
    def _on_storage_error(self, sender: object, *, operation: str, **_: object) -> None:
        child = self._storage_errors.get(operation)
        if child is not None:
            child.inc()

    # -- scrape-time state -------------------------------------------------------------

    async def refresh(self) -> TableSummary | None:
        """Await the storage's summary (totals by scope kind, the ``top_k`` largest
        scopes) and keep it for collectors that cannot await.

        Returns the snapshot, or ``None`` if the registry is gone or its storage failed
        (logged; row gauges are then left out rather than shown stale).
        """
        registry = self.registry
        if registry is None:
            return None
        try:
            async with asyncio.timeout(self.stats_timeout):
                stats = await registry.storage.summary(
                    self.top_k, near_quota_rows(registry.max_rows_per_scope)
                )
        except TimeoutError:
            logger.warning(
                "cancellation stats unavailable for /metrics: no answer in %.1f s",
                self.stats_timeout,
            )
            self._storage_errors["stats"].inc()
            self._probe_ok, self._snapshot = False, None
            return None
        except Exception as exc:
            logger.debug("cancellation stats unavailable for /metrics: %s", exc)
            self._probe_ok, self._snapshot = False, None
            return None
        self._probe_ok, self._snapshot = True, stats
        return stats

    def _summary(self) -> TableSummary | None:
        pending = _pending.get()
        if pending is not None and pending[0] is self and pending[1] is not None:
            return pending[1]
        registry = self.registry
        if registry is None:
            return None
        # From an exporter thread (start_http_server) a Redis storage is read on its own
        # loop, within stats_timeout; on that loop itself, the last awaited snapshot.
        near = near_quota_rows(registry.max_rows_per_scope)
        stats = registry.storage.summary_from_thread(self.top_k, self.stats_timeout, near)
        return stats if stats is not None else self._snapshot

    def gauge_state(self) -> GaugeState | None:
        """What this scrape's gauges show (``None`` once the registry is gone)."""
        registry = self._registry_ref() if self._registry_ref is not None else None
        if registry is None:
            return None
        if self._files is not None:
            rejections = self._files.select(self.rejections.top)
        else:
            rejections = self.rejections.select()
        storage = registry.storage
        return GaugeState(
            storage=self._storage,
            up=storage.available and self._probe_ok is not False,
            max_rows=registry.max_rows,
            max_rows_per_scope=registry.max_rows_per_scope,
            summary=self._summary(),
            rejections=rejections,
            top_k=self.top_k,
            labeler=self.labeler,
            ignored=ignored_by_tool(registry),
        )

    # -- exposition --------------------------------------------------------------------

    def collectors(self) -> list[Collector]:
        """The scrape-time collector, to register in a multiprocess exposition registry
        (``CollectorRegistry()`` + ``MultiProcessCollector``) of your own."""
        return [self._collector]

    def exposition_registry(self) -> CollectorRegistry:
        """What a scrape renders: in multiprocess mode a fresh registry holding a
        ``MultiProcessCollector`` (every worker's counters) and this bridge's collector;
        otherwise the collector registry itself."""
        if self.multiprocess_dir is not None:
            from prometheus_client.multiprocess import MultiProcessCollector

            exposition = CollectorRegistry()
            # (Any: prometheus_client types this constructor in some versions only)
            collector: Any = MultiProcessCollector
            collector(exposition, path=self.multiprocess_dir)
            exposition.register(self._collector)
            return exposition
        if self.collector_registry is None:
            raise ConfigurationError("this bridge has no collector registry to expose")
        return self.collector_registry

    async def render(self, accept: str = "") -> tuple[bytes, str]:
        """Await fresh stats, then render the exposition for an ``Accept`` header.

        Returns ``(body, content_type)``.
        """
        stats = await self.refresh()
        encoder, content_type = choose_encoder(accept)
        token = _pending.set((self, stats))
        try:
            body = encoder(self.exposition_registry())
        finally:
            _pending.reset(token)
        return body, content_type
