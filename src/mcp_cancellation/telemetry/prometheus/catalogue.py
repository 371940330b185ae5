"""The metric catalogue, as the Prometheus bridge exports it (see
:mod:`mcp_cancellation.telemetry._catalogue`, shared with the OpenTelemetry bridge)."""

from __future__ import annotations

from .._catalogue import (
    ALL,
    METRIC_NAMES,
    METRICS,
    PREFIX,
    REJECT_REASONS,
    TABLE_STATE,
    TABLES,
    MetricInfo,
)

__all__ = [
    "ALL",
    "METRICS",
    "METRIC_NAMES",
    "PREFIX",
    "REJECT_REASONS",
    "TABLES",
    "TABLE_STATE",
    "MetricInfo",
]
