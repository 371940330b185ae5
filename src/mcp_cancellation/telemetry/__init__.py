"""Telemetry bridges: the registry's signals as OpenTelemetry spans and metrics, and as
Prometheus metrics.

Nothing in the registry, storage or middleware imports these; they subscribe to
:mod:`mcp_cancellation.signals` and read registry state. Each submodule needs its extra:
:mod:`.otel` needs ``mcp-cancellation[otel]``, :mod:`.prometheus` needs
``mcp-cancellation[prometheus]``. The bridges load their submodule on first use;
``METRICS`` and ``METRIC_NAMES`` (every metric the bridges export) need no extra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._extras import lazy
from ._catalogue import METRIC_NAMES, METRICS

if TYPE_CHECKING:
    from .otel import OpenTelemetryBridge, instrument, uninstrument
    from .prometheus import PrometheusBridge, metrics_app

__all__ = [
    "METRICS",
    "METRIC_NAMES",
    "OpenTelemetryBridge",
    "PrometheusBridge",
    "instrument",
    "metrics_app",
    "uninstrument",
]

__getattr__ = lazy(
    __name__,
    {
        "OpenTelemetryBridge": ".otel",
        "instrument": ".otel",
        "uninstrument": ".otel",
        "PrometheusBridge": ".prometheus",
        "metrics_app": ".prometheus",
    },
)
