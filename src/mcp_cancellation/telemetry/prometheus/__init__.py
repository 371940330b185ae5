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
  (see :class:`mcp_cancellation.scope.ScopeLabeler`).

The package is split by job: :mod:`.catalogue` (names, types, labels, help),
:mod:`.bridge` (signal counters), :mod:`.collector` (scrape-time gauges),
:mod:`.multiprocess` (``PROMETHEUS_MULTIPROC_DIR``) and :mod:`.app` (``/metrics``).

Usage::

    app = Starlette(routes=[Route("/metrics", metrics_app(registry))])   # or the demo

or, with your own ``prometheus_client`` setup::

    bridge = PrometheusBridge(registry, collector_registry=REGISTRY).install()

Gauges need the table's state synchronously at collect time: the storage's summary (rows
by scope kind and the ``top_k`` largest scopes, read from its scope-size index, never a
scan of the table). :class:`MemoryStorage` gives it at once (``summary_from_thread()``); a
shared storage such as Redis cannot be awaited inside ``collect()``, so
:func:`metrics_app` awaits it (:meth:`PrometheusBridge.refresh`) before rendering and hands
it to the collector; other exposition paths read it from their own thread
(``Storage.summary_from_thread``), or, on the storage's own loop, use the last summary
taken by :meth:`PrometheusBridge.refresh` (no row gauges before the first one).

Multi-process mode (``PROMETHEUS_MULTIPROC_DIR`` set before ``prometheus_client`` is
imported): counters are written to the shared directory and add up across workers in the
exposition. Heavy-hitter counts are written there too (a small JSON file per process,
flushed every second) and summed across workers. Row gauges come from the storage as seen
by the worker that answers the scrape: global with a shared storage (Redis), that worker's
own rows only with :class:`MemoryStorage`. See ``docs/metrics.md``.
"""

from __future__ import annotations

from ._app import metrics_app
from ._bridge import PrometheusBridge
from ._catalogue import METRIC_NAMES, METRICS

__all__ = [
    "METRICS",
    "METRIC_NAMES",
    "PrometheusBridge",
    "metrics_app",
]
