"""The names the OpenTelemetry bridge emits: tracer and meter, span and event names,
attributes, units and the meter instruments (see :mod:`mcp_cancellation.telemetry.otel`)."""

from __future__ import annotations

from typing import Final

from .._catalogue import ALL, PREFIX, one_two_five, otel_name

__all__ = [
    "ATTRIBUTES",
    "CLEANUP_BUCKETS",
    "ERROR_TYPE",
    "EVICTED",
    "IN_FLIGHT_REMOVED",
    "METHOD",
    "REASON",
    "REMOVED",
    "REQUEST_ID",
    "SCOPE",
    "SCOPE_KIND",
    "SOURCE",
    "DURATION",
    "EVENT_CANCEL",
    "EVENT_EVICT",
    "EVENT_REJECTED",
    "INSTRUMENTATION_NAME",
    "METER_INSTRUMENTS",
    "SPAN_CANCEL",
    "SPAN_CLEANUP",
    "SPAN_NAMES",
    "SPAN_TASK",
    "TASK_ID",
    "TASK_STATUS",
    "TOOL_NAME",
    "UNITS",
]

#: Name of the tracer and the meter (the instrumentation scope).
INSTRUMENTATION_NAME = "mcp_cancellation"

SPAN_CLEANUP = "mcp_cancellation.cleanup"
#: Every span name this bridge creates.
#: A cancellation with no span to carry its event (a notification the middleware
#: answered, a closed stream, an operator's, outside any server span).
SPAN_CANCEL = "mcp_cancellation.cancel"
#: A task's work, from its creation to its end, linked to the request that created it.
SPAN_TASK = "mcp_cancellation.task"
SPAN_NAMES = frozenset({SPAN_CLEANUP, SPAN_CANCEL, SPAN_TASK})
#: The event added to the current span for a recorded cancellation.
EVENT_CANCEL = "mcp_cancellation.cancel"
#: The event added to the current span for each scope an eviction batch took rows from.
EVENT_EVICT = "mcp_cancellation.evict"
#: The event added to the current span for a refused cancellation.
EVENT_REJECTED = "mcp_cancellation.rejected"

REQUEST_ID = "mcp_cancellation.request.id"
METHOD = "mcp.method.name"
ERROR_TYPE = "error.type"
SOURCE = "mcp_cancellation.source"
SCOPE_KIND = "mcp_cancellation.scope_kind"
SCOPE = "mcp_cancellation.scope"
REASON = "mcp_cancellation.reason"
REMOVED = "mcp_cancellation.removed"
IN_FLIGHT_REMOVED = "mcp_cancellation.in_flight_removed"
EVICTED = "mcp_cancellation.evicted"
TASK_ID = "mcp_cancellation.task.id"
TASK_STATUS = "mcp_cancellation.task.status"
TOOL_NAME = "gen_ai.tool.name"
#: Every span and event attribute this bridge sets.
ATTRIBUTES = frozenset(
    {
        REQUEST_ID,
        METHOD,
        ERROR_TYPE,
        SOURCE,
        SCOPE_KIND,
        SCOPE,
        REASON,
        REMOVED,
        IN_FLIGHT_REMOVED,
        EVICTED,
        TASK_ID,
        TASK_STATUS,
        TOOL_NAME,
    }
)

#: The unit of each catalogue metric (by name without the prefix), UCUM-style.
UNITS: Final = {
    "cancelled_total": "{cancellation}",
    "rejected_total": "{cancellation}",
    "evicted_total": "{row}",
    "cleanup_removed_total": "{row}",
    "storage_errors_total": "{error}",
    "rows": "{row}",
    "in_flight": "{row}",
    "max_rows": "{row}",
    "max_rows_per_scope": "{row}",
    "scope_rows": "{row}",
    "scopes_near_quota": "{scope}",
    "storage_up": "",
    "scope_rejections": "{cancellation}",
    "cancel_to_stop_seconds": "s",
    "cancellations_ignored_total": "{request}",
    "operator_cancelled_total": "{cancellation}",
    "ignored_cancellations": "{request}",
    "tasks_created_total": "{task}",
    "tasks_ended_total": "{task}",
    "tasks_rejected_total": "{call}",
    "tasks_running": "{task}",
    "task_duration_seconds": "s",
}
#: Bucket boundaries (seconds) of the cleanup-duration histogram.
CLEANUP_BUCKETS: Final = one_two_five(0.001, 10.0)
#: The cleanup-duration histogram (OpenTelemetry's only; not in the catalogue).
DURATION = "mcp_cancellation.cleanup.duration"

#: Meter instruments: name -> (kind, unit, attributes). The attributes are the labels of
#: the catalogue's Prometheus metric of the same name.
METER_INSTRUMENTS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    otel_name(info.name): (info.type, UNITS[info.name.removeprefix(PREFIX)], info.labels)
    for info in ALL
}
METER_INSTRUMENTS[DURATION] = ("histogram", "s", ())
