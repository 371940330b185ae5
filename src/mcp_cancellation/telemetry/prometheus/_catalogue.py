"""The metric catalogue, as the Prometheus bridge exports it (see
:mod:`mcp_cancellation.telemetry._catalogue`, shared with the OpenTelemetry bridge)."""

from __future__ import annotations

from .._catalogue import ALL as ALL
from .._catalogue import CANCEL_TO_STOP_BUCKETS as CANCEL_TO_STOP_BUCKETS
from .._catalogue import METRIC_NAMES as METRIC_NAMES
from .._catalogue import METRICS as METRICS
from .._catalogue import NEAR_QUOTA as NEAR_QUOTA
from .._catalogue import OUTCOMES as OUTCOMES
from .._catalogue import PREFIX as PREFIX
from .._catalogue import REJECT_REASONS as REJECT_REASONS
from .._catalogue import REJECTIONS as REJECTIONS
from .._catalogue import SERIES as SERIES
from .._catalogue import TABLE_STATE as TABLE_STATE
from .._catalogue import TABLES as TABLES
from .._catalogue import MetricInfo as MetricInfo
