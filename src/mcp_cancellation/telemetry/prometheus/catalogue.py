"""The metric catalogue, as the Prometheus bridge exports it (see
:mod:`mcp_cancellation.telemetry._catalogue`, shared with the OpenTelemetry bridge)."""

from __future__ import annotations

from .._catalogue import (
    ALL,
    CANCEL_TO_STOP_BUCKETS,
    METRIC_NAMES,
    METRICS,
    NEAR_QUOTA,
    OUTCOMES,
    PREFIX,
    REJECT_REASONS,
    REJECTIONS,
    SERIES,
    TABLE_STATE,
    TABLES,
    MetricInfo,
)

__all__ = [
    "ALL",
    "CANCEL_TO_STOP_BUCKETS",
    "METRICS",
    "METRIC_NAMES",
    "NEAR_QUOTA",
    "OUTCOMES",
    "PREFIX",
    "REJECTIONS",
    "REJECT_REASONS",
    "SERIES",
    "TABLES",
    "TABLE_STATE",
    "MetricInfo",
]
