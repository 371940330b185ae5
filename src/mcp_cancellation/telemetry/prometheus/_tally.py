"""Counters by scope kind, counted cheaply (private).

``request.cancelled`` is the one signal every recorded cancellation sends, so its counter
is on ``cancel()``'s path. A ``prometheus_client`` child spends three Python calls and a
``with`` on its lock per increment (about 0.6 µs here, an eighth of a whole ``cancel()``);
:class:`KindTally` adds to a plain int under a lock taken without ``with``, and its own
collector exposes the same counter family (``_total`` and ``_created`` per scope kind,
every kind from the start). ``evicted_total`` is counted the same way, by kind (an
amount per kind for each ``cancellation.evicted_batch``). In multiprocess mode the counters
must live in prometheus_client's files, so :class:`KindChildren` keeps the ordinary
children behind the same ``inc``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol

from ..._extras import requires

with requires("prometheus", "The Prometheus bridge (mcp_cancellation.telemetry.prometheus)"):
    from prometheus_client import Counter
    from prometheus_client.core import CounterMetricFamily, Metric

__all__ = ["KindChildren", "KindCounter", "KindTally"]


class KindCounter(Protocol):
    def inc(self, kind: str, amount: int = 1) -> None: ...


class KindTally:
    """A counter with one label, counted in this process and exposed by its collector
    (register it in a ``CollectorRegistry`` like a ``Counter``)."""

    def __init__(self, name: str, documentation: str, label: str, values: Sequence[str]) -> None:
        self._name = name.removesuffix("_total")
        self._documentation = documentation
        self._label = label
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(values, 0)
        self._created = time.time()

    def inc(self, kind: str, amount: int = 1) -> None:
        """Count *amount* (>= 0) for *kind* (one of the values given; anything else
        raises KeyError)."""
        lock = self._lock
        lock.acquire()
        try:
            self._counts[kind] += amount
        finally:
            lock.release()

    def value(self, kind: str) -> int:
        return self._counts[kind]

    def _family(self) -> CounterMetricFamily:
        return CounterMetricFamily(self._name, self._documentation, labels=[self._label])

    def describe(self) -> Iterable[Metric]:
        yield self._family()

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            counts = list(self._counts.items())
        family = self._family()
        for kind, count in counts:
            family.add_metric([kind], count, created=self._created)
        yield family


class KindChildren:
    """The same ``inc`` over an ordinary ``Counter``'s children (multiprocess mode)."""

    def __init__(self, counter: Counter, values: Sequence[str]) -> None:
        self._children = {value: counter.labels(value) for value in values}

    def inc(self, kind: str, amount: int = 1) -> None:
        self._children[kind].inc(amount)
