"""Prometheus bridge: signal counters, scrape-time gauges and a ``/metrics`` ASGI app.

Counters (``mcp_cancellation_*_total``) increment on the registry's blinker signals. Gauges
are computed at scrape time by a custom collector that reads the registry's state; nothing
is kept up to date on the hot path. Every label is bounded:

* ``scope_kind`` has five values, ``reason`` two, ``table`` two;
* ``scope`` appears only on ``mcp_cancellation_scope_rows`` (the top K scopes by rows) and
  ``mcp_cancellation_scope_rejections`` (the top K rejected scopes, estimated by a
  Space-Saving heavy-hitters structure of fixed size), so a flood from a million addresses
  exports at most 2·K scope series;
* session scopes are shown as ``session:<12 hex digits>``, never the id
  (see :mod:`mcp_cancellation.telemetry._labels`).

Usage::

    app = Starlette(routes=[Mount("/metrics", metrics_app(registry))])   # or the demo

or, with your own ``prometheus_client`` setup::

    bridge = PrometheusBridge(registry, collector_registry=REGISTRY).install()

Gauges need the registry's row counts synchronously at collect time. :class:`MemoryStorage`
gives them (``stats_nowait()``); a shared storage such as Redis cannot be awaited inside
``collect()``, so :func:`metrics_app` awaits ``registry.stats()`` before rendering and hands
the snapshot to the collector; other exposition paths use the last snapshot taken by
:meth:`PrometheusBridge.refresh` (or export no row gauges before the first one).

Multi-process mode (``PROMETHEUS_MULTIPROC_DIR`` set before ``prometheus_client`` is
imported): counters are written to the shared directory and add up across workers in the
exposition. Heavy-hitter counts are written there too (a small JSON file per process,
flushed every second) and summed across workers. Row gauges come from the storage as seen
by the worker that answers the scrape: global with a shared storage (Redis), that worker's
own rows only with :class:`MemoryStorage`. See ``docs/metrics.md``.
"""

from __future__ import annotations

import contextvars
import glob
import heapq
import json
import logging
import math
import os
import threading
import uuid
import weakref
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, Final

from .. import signals
from .._extras import requires
from ..errors import ConfigurationError
from ..scope import SCOPE_KINDS, ScopeKind, scope_kind
from ..storage.base import StorageStats

with requires("prometheus", "The Prometheus bridge (mcp_cancellation.telemetry.prometheus)"):
    from prometheus_client import REGISTRY, CollectorRegistry, Counter
    from prometheus_client.core import GaugeMetricFamily, Metric
    from prometheus_client.exposition import choose_encoder
    from prometheus_client.registry import Collector

from ._guard import disconnect_all, never_raise
from ._heavy_hitters import SpaceSaving
from ._labels import ScopeLabeler, resolve_key

if TYPE_CHECKING:
    from ..registry import CancellationRegistry

__all__ = [
    "METRICS",
    "METRIC_NAMES",
    "MetricInfo",
    "MetricsApp",
    "PrometheusBridge",
    "metrics_app",
]

logger = logging.getLogger("mcp_cancellation.telemetry")

PREFIX: Final = "mcp_cancellation_"
MULTIPROC_ENV: Final = "PROMETHEUS_MULTIPROC_DIR"
_HITTERS_GLOB: Final = "mcp_cancellation_hitters_*.json"


class MetricInfo:
    """What one exported metric is: its Prometheus ``type``, ``labels`` and ``help``."""

    __slots__ = ("help", "labels", "name", "type")

    def __init__(self, name: str, type: str, labels: tuple[str, ...], help: str) -> None:
        self.name = name
        self.type = type
        self.labels = labels
        self.help = help

    def __repr__(self) -> str:
        return f"MetricInfo({self.name!r}, {self.type!r}, {self.labels!r})"


_METRICS: tuple[MetricInfo, ...] = (
    MetricInfo(
        PREFIX + "cancelled_total",
        "counter",
        ("scope_kind",),
        "Cancellations recorded, by scope kind.",
    ),
    MetricInfo(
        PREFIX + "rejected_total",
        "counter",
        ("scope_kind", "reason"),
        "Cancellations refused: reason is quota (per-scope quota full) or invalid_request_id.",
    ),
    MetricInfo(
        PREFIX + "evicted_total",
        "counter",
        ("scope_kind",),
        "Cancellation rows evicted because the global cap (max_rows) was reached.",
    ),
    MetricInfo(
        PREFIX + "cleanup_removed_total",
        "counter",
        ("table",),
        "Rows removed by cleanup passes: expired cancellations, in_flight rows of dead owners.",
    ),
    MetricInfo(PREFIX + "rows", "gauge", ("scope_kind",), "Cancellation rows, by scope kind."),
    MetricInfo(
        PREFIX + "in_flight", "gauge", ("scope_kind",), "In-flight request rows, by scope kind."
    ),
    MetricInfo(
        PREFIX + "max_rows", "gauge", (), "Global cap on cancellation rows (+Inf: disabled)."
    ),
    MetricInfo(
        PREFIX + "max_rows_per_scope",
        "gauge",
        (),
        "Per-scope quota on cancellation rows (+Inf: disabled).",
    ),
    MetricInfo(
        PREFIX + "scope_rows",
        "gauge",
        ("scope",),
        "Cancellation rows of the top K scopes by rows (session scopes hashed).",
    ),
    MetricInfo(
        PREFIX + "scope_rejections",
        "gauge",
        ("scope",),
        "Rejections of the top K rejected scopes since start (Space-Saving estimate, an upper "
        "bound; session scopes hashed).",
    ),
)

#: Every exported metric, by the name used in PromQL (counters with their ``_total``).
METRICS: Final[Mapping[str, MetricInfo]] = {m.name: m for m in _METRICS}
#: The set of exported metric names, for validating dashboards and alert rules.
METRIC_NAMES: Final[frozenset[str]] = frozenset(METRICS)

_TABLES: Final = ("cancellations", "in_flight")
_REJECT_REASONS: Final = ("quota", "invalid_request_id")

# The snapshot metrics_app awaited for the scrape being rendered in this task.
_pending: contextvars.ContextVar[tuple[PrometheusBridge, StorageStats | None] | None] = (
    contextvars.ContextVar("mcp_cancellation_pending_stats", default=None)
)


def _limit(value: int | None) -> float:
    return math.inf if value is None else float(value)


def _top(counts: Mapping[str, int], k: int) -> list[tuple[str, int]]:
    return heapq.nsmallest(k, counts.items(), key=lambda kv: (-kv[1], kv[0]))


class _HitterFiles:
    """Per-process heavy-hitter counts in the multiprocess directory, summed on scrape.

    Only labels (session scopes already hashed) are written. A daemon thread rewrites this
    process's file (atomically, by rename) at most every *interval* seconds when it changed.
    """

    def __init__(self, directory: str, hitters: SpaceSaving, interval: float = 1.0) -> None:
        self.directory = directory
        self.path = os.path.join(
            directory, f"mcp_cancellation_hitters_{os.getpid()}_{uuid.uuid4().hex[:8]}.json"
        )
        self._hitters = hitters
        self._interval = interval
        self._dirty = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._run, name="mcp-cancellation-hitters", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join(timeout=5)
        self.flush()

    def close_nowait(self) -> None:
        """Ask the flusher thread to stop, without waiting (for finalizers)."""
        self._stop.set()

    def mark(self) -> None:
        self._dirty.set()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.flush()
        self.flush()  # stopping (uninstall, or the registry was garbage-collected)

    def flush(self) -> None:
        """Write this process's counts now (if they changed since the last write)."""
        if not self._dirty.is_set():
            return
        self._dirty.clear()
        tmp = self.path + ".tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(self._hitters.snapshot(), fh)
            os.replace(tmp, self.path)
        except OSError as exc:  # pragma: no cover - a full or vanished directory
            logger.warning("could not write heavy-hitter counts to %s: %s", self.path, exc)

    def merged(self) -> dict[str, int]:
        """Counts summed over every process's file (this one's read from memory)."""
        total: dict[str, int] = dict(self._hitters.snapshot())
        for path in glob.glob(os.path.join(self.directory, _HITTERS_GLOB)):
            if path == self.path:
                continue
            try:
                with open(path, encoding="utf-8") as fh:
                    data = json.load(fh)
            except (OSError, ValueError):
                continue  # being replaced or unreadable: skip this scrape
            if isinstance(data, dict):
                for label, count in data.items():
                    if isinstance(label, str) and isinstance(count, int):
                        total[label] = total.get(label, 0) + count
        return total


class _StateCollector:
    """Scrape-time gauges read from the registry (and the heavy hitters)."""

    def __init__(self, bridge: PrometheusBridge) -> None:
        self._bridge = weakref.ref(bridge)

    def describe(self) -> Iterable[Metric]:
        for info in _METRICS:
            if info.type == "gauge":
                yield GaugeMetricFamily(info.name, info.help, labels=info.labels)

    def collect(self) -> Iterator[Metric]:
        bridge = self._bridge()
        if bridge is None:
            return
        yield from bridge._collect_gauges()


class PrometheusBridge:
    """Exports one :class:`~mcp_cancellation.CancellationRegistry` to Prometheus.

    :meth:`install` registers the counters and the scrape-time collector in
    *collector_registry* and connects to the registry's signals (only that registry's: the
    sender is filtered); :meth:`uninstall` undoes both. Both are idempotent. One bridge
    per collector registry: the metric names are fixed, so a second registry needs its
    own ``CollectorRegistry``.

    *top_k* bounds the ``scope`` series of each per-scope gauge; the heavy-hitters
    structure keeps ``heavy_hitters_capacity`` counters (default ``10 * top_k``), so a scope
    with more than ``1/capacity`` of all rejections is always among them. *hash_key* keys
    the session-scope digests (see ``docs/metrics.md``). *multiprocess_dir* defaults to
    ``$PROMETHEUS_MULTIPROC_DIR``.
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
    ) -> None:
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise ConfigurationError(f"top_k must be a positive integer, not {top_k!r}")
        capacity = heavy_hitters_capacity if heavy_hitters_capacity is not None else 10 * top_k
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < top_k:
            raise ConfigurationError(
                f"heavy_hitters_capacity must be an integer >= top_k, not {capacity!r}"
            )
        self._registry_ref = weakref.ref(registry)
        self.collector_registry = collector_registry
        self.top_k = top_k
        self.labeler = ScopeLabeler(hash_key)
        self.hitters = SpaceSaving(capacity)
        directory = multiprocess_dir or os.environ.get(MULTIPROC_ENV) or None
        if directory is not None:
            _check_multiprocess(directory)
        self.multiprocess_dir = directory
        self._files = _HitterFiles(directory, self.hitters) if directory else None
        self._collector = _StateCollector(self)
        self._snapshot: StorageStats | None = None
        self._lock = threading.Lock()
        self._installed = False
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self._counters: list[Counter] = []
        self._cancelled: dict[str, Counter] = {}
        self._rejected: dict[tuple[str, str], Counter] = {}
        self._evicted: dict[str, Counter] = {}
        self._cleanup: dict[str, Counter] = {}

    # -- lifecycle ---------------------------------------------------------------------

    @property
    def registry(self) -> CancellationRegistry | None:
        """The bridged registry, or ``None`` once it was garbage-collected."""
        return self._registry_ref()

    @property
    def installed(self) -> bool:
        return self._installed

    def install(self) -> PrometheusBridge:
        """Register the metrics and connect to the signals (idempotent). Returns self."""
        with self._lock:
            if self._installed:
                return self
            registry = self._registry_ref()
            if registry is None:
                raise ConfigurationError("the registry of this bridge no longer exists")
            self._make_counters()
            if self.collector_registry is not None:
                try:
                    self.collector_registry.register(self._collector)
                except ValueError as exc:
                    self._unregister_counters()
                    raise ConfigurationError(
                        "another PrometheusBridge is installed on this CollectorRegistry "
                        "(use one CollectorRegistry per CancellationRegistry)"
                    ) from exc
            for signal, receiver in self._receivers():
                signal.connect(receiver, sender=registry, weak=False)
            # blinker forgets a dead sender but keeps strong receivers: disconnect with it.
            self._finalizer = weakref.finalize(registry, _teardown, self._receivers(), self._files)
            if self._files is not None:
                self._files.start()
            self._installed = True
            return self

    def uninstall(self) -> None:
        """Disconnect from the signals and unregister the metrics (idempotent)."""
        with self._lock:
            if not self._installed:
                return
            self._installed = False
            if self._finalizer is not None:
                self._finalizer.detach()
                self._finalizer = None
            disconnect_all(self._receivers())
            if self.collector_registry is not None:
                self.collector_registry.unregister(self._collector)
            self._unregister_counters()
            if self._files is not None:
                self._files.stop()

    def _receivers(self) -> list[tuple[Any, Callable[..., None]]]:
        return [
            (signals.request_cancelled, self._on_cancelled),
            (signals.cancellation_rejected, self._on_rejected),
            (signals.cancellation_evicted, self._on_evicted),
            (signals.cancellation_cleanup, self._on_cleanup),
        ]

    def _make_counters(self) -> None:
        reg = self.collector_registry
        infos = METRICS
        cancelled = Counter(
            PREFIX + "cancelled",
            infos[PREFIX + "cancelled_total"].help,
            ["scope_kind"],
            registry=None,
        )
        rejected = Counter(
            PREFIX + "rejected",
            infos[PREFIX + "rejected_total"].help,
            ["scope_kind", "reason"],
            registry=None,
        )
        evicted = Counter(
            PREFIX + "evicted",
            infos[PREFIX + "evicted_total"].help,
            ["scope_kind"],
            registry=None,
        )
        cleanup = Counter(
            PREFIX + "cleanup_removed",
            infos[PREFIX + "cleanup_removed_total"].help,
            ["table"],
            registry=None,
        )
        # Every label combination exists from the start, so rate() sees the first event.
        self._cancelled = {k: cancelled.labels(k) for k in SCOPE_KINDS}
        self._evicted = {k: evicted.labels(k) for k in SCOPE_KINDS}
        self._rejected = {
            (k, r): rejected.labels(k, r) for k in SCOPE_KINDS for r in _REJECT_REASONS
        }
        self._cleanup = {t: cleanup.labels(t) for t in _TABLES}
        self._counters = [cancelled, rejected, evicted, cleanup]
        if reg is not None:
            done: list[Counter] = []
            try:
                for counter in self._counters:
                    reg.register(counter)
                    done.append(counter)
            except ValueError as exc:
                for counter in done:
                    reg.unregister(counter)
                self._counters = []
                raise ConfigurationError(
                    "another PrometheusBridge is installed on this CollectorRegistry "
                    "(use one CollectorRegistry per CancellationRegistry)"
                ) from exc

    def _unregister_counters(self) -> None:
        if self.collector_registry is not None:
            for counter in self._counters:
                self.collector_registry.unregister(counter)
        self._counters = []

    # -- signal receivers (hot path: a dict lookup and an increment each) --------------

    @never_raise
    def _on_cancelled(self, sender: object, *, scope: str, **_: object) -> None:
        self._cancelled[scope_kind(scope)].inc()

    @never_raise
    def _on_rejected(self, sender: object, *, scope: str, reason: str, **_: object) -> None:
        child = self._rejected.get((scope_kind(scope), reason))
        if child is not None:
            child.inc()
        self.hitters.add(self.labeler(scope))
        if self._files is not None:
            self._files.mark()

    @never_raise
    def _on_evicted(self, sender: object, *, scope: str, count: int, **_: object) -> None:
        self._evicted[scope_kind(scope)].inc(count)

    @never_raise
    def _on_cleanup(
        self, sender: object, *, removed: int, in_flight_removed: int, **_: object
    ) -> None:
        if removed:
            self._cleanup["cancellations"].inc(removed)
        if in_flight_removed:
            self._cleanup["in_flight"].inc(in_flight_removed)

    # -- scrape-time state -------------------------------------------------------------

    async def refresh(self) -> StorageStats | None:
        """Await the registry's stats and keep them for collectors that cannot await.

        Returns the snapshot, or ``None`` if the registry is gone or its storage failed
        (logged; row gauges are then left out rather than shown stale).
        """
        registry = self._registry_ref()
        if registry is None:
            return None
        try:
            stats = await registry.stats()
        except Exception as exc:
            logger.warning("cancellation stats unavailable for /metrics: %s", exc)
            self._snapshot = None
            return None
        self._snapshot = stats
        return stats

    def _stats(self) -> StorageStats | None:
        pending = _pending.get()
        if pending is not None and pending[0] is self and pending[1] is not None:
            return pending[1]
        registry = self._registry_ref()
        if registry is None:
            return None
        stats = registry.storage.stats_nowait()
        return stats if stats is not None else self._snapshot

    def _collect_gauges(self) -> Iterator[Metric]:
        registry = self._registry_ref()
        if registry is not None:
            stats = self._stats()
            if stats is not None:
                yield from self._row_gauges(stats)
            yield GaugeMetricFamily(
                PREFIX + "max_rows", METRICS[PREFIX + "max_rows"].help, _limit(registry.max_rows)
            )
            yield GaugeMetricFamily(
                PREFIX + "max_rows_per_scope",
                METRICS[PREFIX + "max_rows_per_scope"].help,
                _limit(registry.max_rows_per_scope),
            )
        counts = self._files.merged() if self._files is not None else self.hitters.snapshot()
        rejections = GaugeMetricFamily(
            PREFIX + "scope_rejections",
            METRICS[PREFIX + "scope_rejections"].help,
            labels=("scope",),
        )
        for label, count in _top(counts, self.top_k):
            rejections.add_metric((label,), count)
        yield rejections

    def _row_gauges(self, stats: StorageStats) -> Iterator[Metric]:
        for name, table in ((PREFIX + "rows", stats.rows), (PREFIX + "in_flight", stats.in_flight)):
            by_kind: dict[ScopeKind, int] = dict.fromkeys(SCOPE_KINDS, 0)
            for scope, count in table.items():
                by_kind[scope_kind(scope)] += count
            family = GaugeMetricFamily(name, METRICS[name].help, labels=("scope_kind",))
            for kind, count in by_kind.items():
                family.add_metric((kind,), count)
            yield family
        # Top K by rows; labels are merged first (a digest or a cut may join two scopes).
        top = _top(stats.rows, self.top_k)
        by_label: dict[str, int] = {}
        for scope, count in top:
            label = self.labeler(scope)
            by_label[label] = by_label.get(label, 0) + count
        family = GaugeMetricFamily(
            PREFIX + "scope_rows", METRICS[PREFIX + "scope_rows"].help, labels=("scope",)
        )
        for label, count in by_label.items():
            family.add_metric((label,), count)
        yield family

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
            MultiProcessCollector(exposition, path=self.multiprocess_dir)  # type: ignore[no-untyped-call]
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


def _check_multiprocess(directory: str) -> None:
    if not os.path.isdir(directory):
        raise ConfigurationError(f"{MULTIPROC_ENV}={directory!r} is not a directory")
    from prometheus_client import values

    if values.ValueClass is values.MutexValue:
        # prometheus_client chose its value storage when it was imported, before the
        # variable was set: this process's counters will be missing from the exposition.
        logger.warning(
            "%s is set but prometheus_client was imported before it: set it before the "
            "process starts, or this worker's counters are not shared",
            MULTIPROC_ENV,
        )


def _teardown(receivers: list[tuple[Any, Callable[..., None]]], files: _HitterFiles | None) -> None:
    """Run when a bridged registry is garbage-collected without uninstall()."""
    disconnect_all(receivers)
    if files is not None:
        files.close_nowait()


# -- ASGI ---------------------------------------------------------------------------------

_Scope = MutableMapping[str, Any]
_Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
_Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

# Bridges installed by metrics_app, per registry and collector registry (None: private).
_app_bridges: weakref.WeakKeyDictionary[CancellationRegistry, dict[int, PrometheusBridge]] = (
    weakref.WeakKeyDictionary()
)
_app_lock = threading.Lock()


def _bridge_for(
    registry: CancellationRegistry,
    collector_registry: CollectorRegistry | None,
    top_k: int,
    hash_key: str | bytes | None,
) -> PrometheusBridge:
    with _app_lock:
        bridges = _app_bridges.setdefault(registry, {})
        key = 0 if collector_registry is None else id(collector_registry)
        bridge = bridges.get(key)
        if bridge is not None and bridge.installed:
            if bridge.top_k != top_k or bridge.labeler.key != resolve_key(hash_key):
                raise ConfigurationError(
                    "metrics_app() for this registry was already set up with other options "
                    f"(top_k={bridge.top_k}, or another hash_key)"
                )
            return bridge
        bridge = PrometheusBridge(
            registry,
            collector_registry=collector_registry or CollectorRegistry(),
            top_k=top_k,
            hash_key=hash_key,
        ).install()
        bridges[key] = bridge
        return bridge


class MetricsApp:
    """The ASGI app returned by :func:`metrics_app`; ``.bridge`` is its bridge."""

    def __init__(self, registry: CancellationRegistry, bridge: PrometheusBridge) -> None:
        self.registry = registry  # keeps the registry alive as long as the app is mounted
        self.bridge = bridge

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        method = scope.get("method", "GET")
        if method not in ("GET", "HEAD"):
            await send(
                {
                    "type": "http.response.start",
                    "status": 405,
                    "headers": [(b"allow", b"GET, HEAD"), (b"content-length", b"0")],
                }
            )
            await send({"type": "http.response.body", "body": b""})
            return
        accept = ""
        for name, value in scope.get("headers") or ():
            if name.lower() == b"accept":
                accept = value.decode("latin-1")
        body, content_type = await self.bridge.render(accept)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", content_type.encode("latin-1")),
                    (b"content-length", str(len(body)).encode("ascii")),
                    (b"cache-control", b"no-store"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": b"" if method == "HEAD" else body})


def metrics_app(
    registry: CancellationRegistry,
    *,
    top_k: int = 20,
    collector_registry: CollectorRegistry | None = None,
    hash_key: str | bytes | None = None,
) -> MetricsApp:
    """An ASGI app serving the Prometheus exposition of *registry* at any path.

    Installs a :class:`PrometheusBridge` for *registry* (once: calling this again for the
    same registry and collector registry reuses it). By default the metrics live in a
    private ``CollectorRegistry``, so several apps in one process never clash; pass
    ``collector_registry=prometheus_client.REGISTRY`` to serve the process-wide one (with
    everything else registered there). ``GET`` and ``HEAD`` only; content negotiation
    (OpenMetrics) follows ``Accept``.
    """
    return MetricsApp(registry, _bridge_for(registry, collector_registry, top_k, hash_key))
