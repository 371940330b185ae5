"""Telemetry bridges: the registry's signals as OpenTelemetry spans and metrics, and as
Prometheus metrics.

Nothing in the registry, storage or middleware imports these; they subscribe to
:mod:`mcp_cancellation.signals` and read registry state. Each submodule needs its extra:
:mod:`.otel` needs ``mcp-cancellation[otel]``, :mod:`.prometheus` needs
``mcp-cancellation[prometheus]``. The names below load their submodule on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .otel import OpenTelemetryBridge, instrument, uninstrument
    from .prometheus import METRIC_NAMES, METRICS, PrometheusBridge, metrics_app

__all__ = [
    "METRICS",
    "METRIC_NAMES",
    "OpenTelemetryBridge",
    "PrometheusBridge",
    "instrument",
    "metrics_app",
    "uninstrument",
]

_OTEL = frozenset({"OpenTelemetryBridge", "instrument", "uninstrument"})
_PROMETHEUS = frozenset({"METRICS", "METRIC_NAMES", "PrometheusBridge", "metrics_app"})


def __getattr__(name: str) -> Any:
    if name in _OTEL:
        from . import otel

        return getattr(otel, name)
    if name in _PROMETHEUS:
        from . import prometheus

        return getattr(prometheus, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
