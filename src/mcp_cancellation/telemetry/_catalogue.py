"""The metric catalogue: every exported name, its type, labels and help (private; public
as :mod:`mcp_cancellation.telemetry.prometheus._catalogue`).

Both bridges export exactly these: the Prometheus bridge under these names, the
OpenTelemetry bridge as instruments whose Prometheus names (after the OTel exporter's
translation) are these. Dashboards, alert rules and their tests validate against
:data:`METRIC_NAMES`. Nothing here imports a metrics library.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Final

from .._token import TOOL_ERROR

__all__ = [
    "ALL",
    "ERROR_TYPE",
    "METHOD_NAME",
    "PROTOCOL_VERSION",
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
    "TASK_BUCKETS",
    "TASK_QUOTA",
    "TASK_REJECT_REASONS",
    "TASK_STATUSES",
    "TABLE_STATE",
    "MetricInfo",
    "OPERATION_BUCKETS",
    "OPERATION_CANCELLED",
    "OPERATION_DURATION",
    "OPERATION_DURATION_OTEL",
    "OPERATION_LABELS",
    "near_quota_rows",
    "operation_labels",
    "one_two_five",
    "otel_name",
]

PREFIX: Final = "mcp_cancellation_"


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


ALL: tuple[MetricInfo, ...] = (
    MetricInfo(
        PREFIX + "cancelled_total",
        "counter",
        ("scope_kind",),
        "Cancellations recorded, by scope kind.",
    ),
    MetricInfo(
        PREFIX + "operator_cancelled_total",
        "counter",
        ("scope_kind",),
        "Cancellations an operator recorded (mcp-cancellation cancel, the admin app), "
        "by scope kind; also counted in cancelled_total.",
    ),
    MetricInfo(
        PREFIX + "rejected_total",
        "counter",
        ("scope_kind", "reason", "mode"),
        "Cancellations refused: reason is quota (per-scope quota full) or invalid_request_id; "
        'mode="shadow" counts what a quota in shadow mode would have refused (recorded '
        "instead).",
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
    MetricInfo(
        PREFIX + "storage_errors_total",
        "counter",
        ("storage", "operation"),
        "Storage operations that failed (the storage did not answer), by operation.",
    ),
    # Table state: the same values from every process that shares one storage, so queries
    # aggregate max by (storage) before they sum (docs/metrics.md, "A shared table").
    MetricInfo(
        PREFIX + "rows",
        "gauge",
        ("storage", "scope_kind"),
        "Cancellation rows of the table, by scope kind.",
    ),
    MetricInfo(
        PREFIX + "in_flight",
        "gauge",
        ("storage", "scope_kind"),
        "In-flight request rows of the table, by scope kind.",
    ),
    MetricInfo(
        PREFIX + "max_rows",
        "gauge",
        ("storage",),
        "Global cap on cancellation rows (+Inf: disabled).",
    ),
    MetricInfo(
        PREFIX + "max_rows_per_scope",
        "gauge",
        ("storage",),
        "Per-scope quota on cancellation rows (+Inf: disabled).",
    ),
    MetricInfo(
        PREFIX + "scopes_near_quota",
        "gauge",
        ("storage",),
        "Scopes holding at least 80% of max_rows_per_scope (0 without a quota).",
    ),
    MetricInfo(
        PREFIX + "scope_rows",
        "gauge",
        ("storage", "scope"),
        "Cancellation rows of the top K scopes by rows (session scopes hashed).",
    ),
    # Per process.
    MetricInfo(
        PREFIX + "storage_up",
        "gauge",
        ("storage",),
        "1 while this process's storage answers, 0 while it does not.",
    ),
    MetricInfo(
        PREFIX + "cancel_to_stop_seconds",
        "histogram",
        ("scope_kind", "outcome"),
        "Seconds from a cancellation reaching the process that runs the request to its "
        "handler ending; outcome is stopped (it stopped because it was cancelled), killed "
        "(the stream_cancel_timeout kill) or completed (it finished its work anyway).",
    ),
    MetricInfo(
        PREFIX + "cancellations_ignored_total",
        "counter",
        ("tool",),
        "Cancelled requests that ran longer than cancel_grace after their cancellation, "
        "counted when they end, by tool (registered names, else other).",
    ),
    MetricInfo(
        PREFIX + "ignored_cancellations",
        "gauge",
        ("tool",),
        "Requests of this process still running more than cancel_grace after their "
        "cancellation, by tool (registered names, else other).",
    ),
    MetricInfo(
        PREFIX + "scope_rejections",
        "gauge",
        ("scope", "reason"),
        "Rejections since start of the most rejected scopes, by reason (quota and "
        "invalid_request_id: cancellations; task_quota: calls that could not be tasks) "
        "(Space-Saving estimate, an upper bound; only scopes certainly among the top K, at "
        "most K new ones per 2 minutes; session scopes hashed).",
    ),
    # Tasks (SEP-2663), counted by the worker that runs each.
    MetricInfo(
        PREFIX + "tasks_created_total",
        "counter",
        ("tool",),
        "Tasks created, by tool (registered names, else other).",
    ),
    MetricInfo(
        PREFIX + "tasks_ended_total",
        "counter",
        ("tool", "status"),
        "Tasks whose work ended, by tool and final status (completed, failed, cancelled).",
    ),
    MetricInfo(
        PREFIX + "tasks_rejected_total",
        "counter",
        ("scope_kind", "reason"),
        "Calls that could have been tasks and ran as plain calls: reason is quota (the "
        "scope holds max_tasks_per_scope tasks), full (the table holds max_tasks tasks), "
        "unavailable (the task table did not answer) or shutdown (the server is stopping).",
    ),
    MetricInfo(
        PREFIX + "tasks_running",
        "gauge",
        ("storage", "tool"),
        "Tasks whose tool runs now, in the whole table, by tool (every process that shares "
        "the table reports the same value).",
    ),
    MetricInfo(
        PREFIX + "task_duration_seconds",
        "histogram",
        ("tool", "status"),
        "Seconds from a task's creation to the end of its work, by tool and final status.",
    ),
)

#: Every exported metric by its catalogue name (counters with their ``_total``; a
#: histogram by its base name).
METRICS: Final[Mapping[str, MetricInfo]] = {m.name: m for m in ALL}
#: Every series name PromQL can use, and its metric: a histogram's ``_bucket``, ``_sum``
#: and ``_count``, every other metric's own name.
SERIES: Final[Mapping[str, MetricInfo]] = {
    name: m
    for m in ALL
    for name in (
        [m.name + suffix for suffix in ("_bucket", "_sum", "_count")]
        if m.type == "histogram"
        else [m.name]
    )
}
#: The set of exported series names, for validating dashboards and alert rules.
METRIC_NAMES: Final[frozenset[str]] = frozenset(SERIES)

#: Values of the ``table`` label of ``cleanup_removed_total``.
TABLES: Final = ("cancellations", "in_flight")
#: Values of the ``reason`` label of ``rejected_total``.
REJECT_REASONS: Final = ("quota", "invalid_request_id")
#: The ``(reason, mode)`` pairs of ``rejected_total``: an invalid id is always refused, a
#: quota rejection is enforced or (shadow mode) only counted.
REJECTIONS: Final = (("quota", "enforce"), ("quota", "shadow"), ("invalid_request_id", "enforce"))
#: A task's final statuses (``status`` of ``tasks_ended_total``).
TASK_STATUSES: Final = ("completed", "failed", "cancelled")
#: Values of the ``reason`` label of ``tasks_rejected_total``.
TASK_REJECT_REASONS: Final = ("quota", "full", "unavailable", "shutdown")
#: The ``scope_rejections`` reason of a scope's call refused as a task by its quota.
TASK_QUOTA: Final = "task_quota"
#: The share of its quota at which a scope counts as near it (``scopes_near_quota``).
NEAR_QUOTA: Final = 0.8


#: Values of the ``outcome`` label of ``cancel_to_stop_seconds`` (as in
#: :data:`mcp_cancellation._token.OUTCOMES`).
def one_two_five(low: float, high: float) -> tuple[float, ...]:
    """Histogram bounds 1, 2.5 and 5 times each power of ten from *low* to *high*
    (both powers of ten): ``one_two_five(0.01, 1.0)`` is ``(0.01, 0.025, ..., 0.5, 1.0)``."""
    first, last = round(math.log10(low)), round(math.log10(high))
    bounds = [float(f"{m}e{e}") for e in range(first, last) for m in ("1", "2.5", "5")]
    return (*bounds, float(f"1e{last}"))


OUTCOMES: Final = ("stopped", "killed", "completed")
#: Bucket bounds (seconds) of ``cancel_to_stop_seconds``: a polling tool stops within
#: tens of milliseconds, a kill comes after ``stream_cancel_timeout`` (10 s by default),
#: and work that ignores its cancellation may run for minutes.
CANCEL_TO_STOP_BUCKETS: Final = (*one_two_five(0.01, 10.0), 15.0, 30.0, 60.0, 120.0, 300.0, 600.0)
#: Bucket bounds (seconds) of ``task_duration_seconds``: from a quick task to an hour.
TASK_BUCKETS: Final = (*one_two_five(0.1, 1000.0), 1800.0, 3600.0)
#: The gauges that describe the (possibly shared) table, labelled with ``storage``.
TABLE_STATE: Final = frozenset(
    PREFIX + n
    for n in (
        "rows",
        "in_flight",
        "max_rows",
        "max_rows_per_scope",
        "scope_rows",
        "scopes_near_quota",
        "tasks_running",
    )
)


def near_quota_rows(quota: int | None) -> int | None:
    """The rows at which a scope of *quota* counts as near it, ``None`` without a quota."""
    return None if quota is None else max(1, math.ceil(NEAR_QUOTA * quota))


def otel_name(prometheus_name: str) -> str:
    """The OpenTelemetry instrument name whose Prometheus translation is *prometheus_name*
    (``mcp_cancellation_cancelled_total`` -> ``mcp_cancellation.cancelled``; the exporter
    adds ``_total`` to counters and ``_seconds`` to instruments whose unit is ``s``)."""
    name = prometheus_name.removesuffix("_total").removesuffix("_seconds")
    return "mcp_cancellation." + name.removeprefix(PREFIX)


# -- the standard MCP server metric (OpenTelemetry's MCP semantic conventions) -----------

#: ``mcp.server.operation.duration`` as Prometheus names it (outside this package's prefix).
OPERATION_DURATION: Final = "mcp_server_operation_duration_seconds"
#: Its OpenTelemetry name.
OPERATION_DURATION_OTEL: Final = "mcp.server.operation.duration"
#: Its bucket bounds (seconds), as the conventions advise.
OPERATION_BUCKETS: Final = (
    0.01,
    0.02,
    0.05,
    0.1,
    0.2,
    0.5,
    1.0,
    2.0,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
)
#: The operation attributes an integration puts in ``RequestToken.labels`` (the
#: conventions' names), read from ``request.ended``'s ``labels``.
METHOD_NAME: Final = "mcp.method.name"
PROTOCOL_VERSION: Final = "mcp.protocol.version"
ERROR_TYPE: Final = "error.type"
#: Its attributes, in label order (Prometheus labels replace the dots with underscores).
OPERATION_LABELS: Final = (
    METHOD_NAME,
    "gen_ai.tool.name",
    ERROR_TYPE,
    PROTOCOL_VERSION,
    "network.transport",
)
#: The ``error.type`` of a call that was cancelled (by a notification, an operator or
#: its client's disconnect); otherwise a failed call's is its JSON-RPC error code
#: (``"-32602"``), or ``tool_error`` for a tool result with ``isError``, as the
#: conventions say; a code not in :data:`ERROR_CODES` is ``_OTHER``.
OPERATION_CANCELLED: Final = "cancelled"
#: The methods a client may call on an MCP server; any other is counted as ``other``, so
#: that a client cannot mint label values.
_METHODS: Final = frozenset(
    {
        "initialize",
        "ping",
        "tools/list",
        "tools/call",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "resources/subscribe",
        "resources/unsubscribe",
        "prompts/list",
        "prompts/get",
        "completion/complete",
        "logging/setLevel",
        "tasks/get",
        "tasks/update",
        "tasks/cancel",
        "tasks/list",
        "tasks/result",
        # 2026-07-28: the conventions' well-known methods of the stateless protocol.
        "server/discover",
        "subscriptions/listen",
    }
)


#: The ``error.type`` of a failed answer whose code is none of :data:`ERROR_CODES` (the
#: conventions' value for any other).
OTHER_ERROR: Final = "_OTHER"
#: The JSON-RPC error codes counted as themselves: JSON-RPC's own, and those MCP and
#: its tasks extension define (and this package's quota error). A server or tool may
#: answer any other code; each would be a series of its own, so they count as
#: :data:`OTHER_ERROR`.
ERROR_CODES: Final = frozenset(
    {
        "-32700",  # parse error
        "-32600",  # invalid request
        "-32601",  # method not found
        "-32602",  # invalid params
        "-32603",  # internal error
        "-32000",  # server error: this package's quota refusal
        "-32002",  # resource not found
        "-32020",  # tasks: Mcp-Name does not match the task
        "-32021",  # tasks: the extension was not declared
        "-32042",  # URL elicitation required
        "-32800",  # request cancelled
    }
)


def _error_label(error_type: str | None) -> str:
    if not error_type:
        return ""
    if error_type == TOOL_ERROR or error_type in ERROR_CODES:
        return error_type
    return OTHER_ERROR


#: The protocol versions published so far; any other is ``other``.
_VERSIONS: Final = frozenset({"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"})


def operation_labels(
    method: str,
    tool: str | None,
    protocol_version: str | None,
    cancelled: bool,
    error_type: str | None = None,
) -> tuple[str, str, str, str, str]:
    """The label values of one operation, bounded (unknown methods and versions are
    ``other``; the tool is already a registered name or ``other``; an error type is
    ``cancelled``, ``tool_error``, one of :data:`ERROR_CODES`, or ``_OTHER``); an
    absent attribute is the empty string, as Prometheus shows it."""
    return (
        method if method in _METHODS else "other",
        tool or "",
        OPERATION_CANCELLED if cancelled else _error_label(error_type),
        ""
        if protocol_version is None
        else protocol_version
        if protocol_version in _VERSIONS
        else "other",
        "tcp",
    )
