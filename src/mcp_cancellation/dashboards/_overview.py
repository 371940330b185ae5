"""The overview dashboard's panels: the table, cancellations, rejections, cleanup, and
whether cancellation stops the work (private; see :mod:`._panels`)."""

from __future__ import annotations

from ._panels import (
    ABUSIVE_UID,
    RATE,
    Panel,
    Row,
    Target,
    metric,
    operations,
    per_table,
    stat,
    table,
)

__all__ = ["OVERVIEW"]

#: Matchers of the two rejection reasons, and the colours of a filling table.
QUOTA = 'reason="quota", mode!="shadow"'
SHADOW = 'reason="quota", mode="shadow"'
INVALID = 'reason="invalid_request_id"'
FILL = (("green", None), ("orange", 0.8), ("red", 0.95))
TO_ABUSIVE = (("Abusive scopes", ABUSIVE_UID),)
#: Matchers of cancelled and completed calls in the standard MCP server metric.
CANCELLED = 'error_type="cancelled"'
COMPLETED = 'error_type=""'
#: Matcher of the failed tasks.
FAILED = 'status="failed"'


OVERVIEW: tuple[Panel | Row, ...] = (
    Row("Table"),
    stat(
        "Rows held",
        "Cancellation rows stored, all selected tables. A table shared by several processes "
        "(one Redis) is counted once.",
        Target(f"sum({per_table('rows')})", "rows"),
    ),
    Panel(
        "gauge",
        "Table fill",
        "Rows of each table against its global cap max_rows. At 100% every new cancellation "
        "evicts a batch of rows, largest scope first.",
        "percentunit",
        (
            Target(
                f"{per_table('rows')} / on (storage) min by (storage) ({table('max_rows')})",
                "{{storage}}",
            ),
        ),
        w=6,
        h=5,
        max=1,
        thresholds=FILL,
        no_value="0",
    ),
    stat(
        "Requests in flight",
        "Requests tracked by the middleware right now (they can be cancelled), all selected "
        "tables, each counted once.",
        Target(f"sum({per_table('in_flight')})", "in flight"),
    ),
    stat(
        "Scopes near their quota",
        "Scopes holding at least 80% of max_rows_per_scope, all selected tables, each counted "
        "once. Before enforcing a new quota, run it in shadow mode and watch this and the "
        "would-be rejections.",
        Target(f"sum(max by (storage) ({table('scopes_near_quota')}))", "near quota"),
        thresholds=(("green", None), ("orange", 1)),
    ),
    stat(
        "Limits",
        "The smallest global cap (max_rows) and per-scope quota (max_rows_per_scope) of the "
        "selected tables: the ones that apply first.",
        Target(f"min({table('max_rows')})", "max_rows"),
        Target(f"min({table('max_rows_per_scope')})", "max_rows_per_scope"),
        no_value=None,
    ),
    Panel(
        "table",
        "Tables",
        "One line per table (storage identity: a Redis address, database and prefix, or one "
        "process's memory): its rows, in-flight requests and limits, read once whatever the "
        "number of processes sharing it, and how many processes report it and reach it.",
        "short",
        (
            Target(per_table("rows"), instant=True, column="Rows"),
            Target(per_table("in_flight"), instant=True, column="In flight"),
            Target(
                f"min by (storage) ({table('max_rows')})",
                instant=True,
                column="max_rows",
            ),
            Target(
                f"min by (storage) ({table('max_rows_per_scope')})",
                instant=True,
                column="max_rows_per_scope",
            ),
            Target(f"count by (storage) ({table('storage_up')})", instant=True, column="Processes"),
            Target(
                f"sum by (storage) ({table('storage_up')})",
                instant=True,
                column="Processes reaching it",
            ),
        ),
        w=24,
        h=6,
        no_value="No table reports",
    ),
    Panel(
        "timeseries",
        "Table fill against max_rows",
        "Rows of each table and the cap it evicts at.",
        "short",
        (
            Target(per_table("rows"), "rows {{storage}}"),
            Target(
                f"min by (storage) ({table('max_rows')})",
                "max_rows {{storage}}",
            ),
        ),
    ),
    Panel(
        "timeseries",
        "Rows by scope kind",
        "Where the rows are: session, principal, ip, global (library callers) or other.",
        "short",
        (
            Target(
                f"sum by (scope_kind) ({per_table('rows', 'scope_kind')})",
                "{{scope_kind}}",
            ),
        ),
        stack=True,
    ),
    Panel(
        "timeseries",
        "In-flight requests by scope kind",
        "Requests being served that a cancellation could reach.",
        "short",
        (
            Target(
                f"sum by (scope_kind) ({per_table('in_flight', 'scope_kind')})",
                "{{scope_kind}}",
            ),
        ),
        stack=True,
        w=24,
    ),
    Row("Storage health"),
    Panel(
        "timeseries",
        "Storage up, per instance",
        "1 while the instance's storage answers, 0 while it does not (a Redis outage): "
        "requests are still served, but cancellations from other requests cannot reach them.",
        "short",
        (
            Target(
                f"min by (instance, storage) ({table('storage_up')})",
                "{{instance}} {{storage}}",
            ),
        ),
        max=1,
        thresholds=(("red", None), ("green", 1)),
        no_value="No instance reports",
    ),
    Panel(
        "timeseries",
        "Storage errors per second by operation",
        "Storage operations that failed: the operation (add, track, finish, stats, heartbeat, "
        "subscribe, ...) and how often. Any sustained rate means the storage is unreachable "
        "or overloaded.",
        "ops",
        (
            Target(
                f"sum by (operation) (rate({metric('storage_errors_total')}[{RATE}]))",
                "{{operation}}",
            ),
        ),
        stack=True,
        no_value="No errors",
    ),
    Row("Traffic"),
    Panel(
        "timeseries",
        "Cancellations per second by scope kind",
        "Cancellations recorded (a notifications/cancelled for a request in flight in the "
        "caller's own scope, or a client disconnect). Ignored notifications (unknown ids, "
        "other callers' ids) are not counted: that is the isolation working.",
        "ops",
        (
            Target(
                f"sum by (scope_kind) (rate({metric('cancelled_total')}[{RATE}]))",
                "{{scope_kind}}",
            ),
        ),
        stack=True,
        no_value="0",
    ),
    Panel(
        "timeseries",
        "Operator cancellations per second",
        "Cancellations recorded by an operator (mcp-cancellation cancel, or the admin app), "
        "by scope kind; they are also in the panel before. See docs/alerts.md for the "
        "commands.",
        "ops",
        (
            Target(
                f"sum by (scope_kind) (rate({metric('operator_cancelled_total')}[{RATE}]))",
                "{{scope_kind}}",
            ),
        ),
        no_value="0",
    ),
    Panel(
        "timeseries",
        "Rejections per second",
        "Cancellations refused: quota (the caller's scope already holds max_rows_per_scope "
        "rows, answered -32000) by scope kind, and invalid request ids (answered -32602). "
        "Who is refused: the abusive-scopes dashboard.",
        "ops",
        (
            Target(
                f"sum by (scope_kind) (rate({metric('rejected_total', QUOTA)}[{RATE}]))",
                "quota {{scope_kind}}",
            ),
            Target(
                f"sum(rate({metric('rejected_total', INVALID)}[{RATE}]))",
                "invalid request id",
            ),
            Target(
                f"sum(rate({metric('rejected_total', SHADOW)}[{RATE}]))",
                "would be refused (shadow mode)",
            ),
        ),
        stack=True,
        no_value="No rejections",
        links=TO_ABUSIVE,
    ),
    Panel(
        "timeseries",
        "Evictions per second by scope kind",
        "Rows dropped because the table reached max_rows. Evicted cancellations are lost (the "
        "tool already saw its flag, but a later check of the row finds nothing). Sustained "
        "evictions mean the cap is too small or someone is filling it.",
        "ops",
        (
            Target(
                f"sum by (scope_kind) (rate({metric('evicted_total')}[{RATE}]))",
                "{{scope_kind}}",
            ),
        ),
        stack=True,
        no_value="No evictions",
        links=TO_ABUSIVE,
    ),
    Panel(
        "timeseries",
        "Cleanup removals per second",
        "Rows the janitor removed: expired cancellations (older than the ttl) and in-flight "
        "rows whose owner is gone (a crashed worker). Steady in-flight removals point at "
        "requests that end without the middleware's finally running.",
        "ops",
        (
            Target(
                f"sum by (table) (rate({metric('cleanup_removed_total')}[{RATE}]))",
                "{{table}}",
            ),
        ),
        no_value="0",
    ),
    Row("Tool calls (mcp.server.operation.duration)"),
    Panel(
        "timeseries",
        "Tool calls per second by tool",
        "Every tools/call the middleware served, by tool (registered names; anything else is "
        "other), from the standard MCP server metric mcp_server_operation_duration_seconds.",
        "reqps",
        (
            Target(
                f"sum by (gen_ai_tool_name) (rate({operations('count')}[{RATE}]))",
                "{{gen_ai_tool_name}}",
            ),
        ),
        w=8,
        no_value="No tool call",
    ),
    Panel(
        "timeseries",
        "Share of tool calls cancelled",
        "Cancelled calls (error_type cancelled: a notification, an operator or a closed "
        "stream) over all calls, by tool. A tool whose share climbs is slow enough for "
        "callers to give up on it.",
        "percentunit",
        (
            Target(
                "sum by (gen_ai_tool_name) "
                f"(rate({operations('count', CANCELLED)}"
                f"[{RATE}])) / sum by (gen_ai_tool_name) (rate({operations('count')}[{RATE}]))",
                "{{gen_ai_tool_name}}",
            ),
        ),
        w=8,
        max=1,
        no_value="No tool call",
    ),
    Panel(
        "timeseries",
        "Duration of cancelled and completed calls (p95)",
        "How long tool calls ran before they ended, cancelled against completed, by tool "
        "(the 95th percentile). Cancelled calls that run as long as completed ones stop late.",
        "s",
        (
            Target(
                "histogram_quantile(0.95, sum by (le, gen_ai_tool_name) (rate("
                f"{operations('bucket', CANCELLED)}"
                f"[{RATE}])))",
                "cancelled {{gen_ai_tool_name}}",
            ),
            Target(
                "histogram_quantile(0.95, sum by (le, gen_ai_tool_name) (rate("
                f"{operations('bucket', COMPLETED)}[{RATE}])))",
                "completed {{gen_ai_tool_name}}",
            ),
        ),
        w=8,
        no_value="No tool call",
    ),
    Row("Does cancellation stop the work?"),
    Panel(
        "heatmap",
        "Cancel-to-stop latency",
        "Time from a cancellation reaching the process that runs the request to its handler "
        "ending, all outcomes. A tool that polls cancelled() stops within one poll interval; "
        "a band at stream_cancel_timeout is the kill of work whose client hung up; anything "
        "later is work that ignored its cancellation.",
        "s",
        (
            Target(
                f"sum by (le) (rate({metric('cancel_to_stop_seconds_bucket')}[{RATE}]))",
                "{{le}}",
            ),
        ),
        no_value="No cancelled request ended",
    ),
    Panel(
        "timeseries",
        "Cancel-to-stop by outcome",
        "The 95th percentile and the mean, by outcome. stopped: the tool stopped because it "
        "was cancelled; killed: the stream_cancel_timeout kill after a disconnect; completed: "
        "the tool finished its work anyway.",
        "s",
        (
            Target(
                "histogram_quantile(0.95, sum by (le, outcome) "
                f"(rate({metric('cancel_to_stop_seconds_bucket')}[{RATE}])))",
                "p95 {{outcome}}",
            ),
            Target(
                f"sum by (outcome) (rate({metric('cancel_to_stop_seconds_sum')}[{RATE}])) "
                f"/ sum by (outcome) (rate({metric('cancel_to_stop_seconds_count')}[{RATE}]))",
                "mean {{outcome}}",
            ),
        ),
        no_value="No cancelled request ended",
    ),
    Panel(
        "bargauge",
        "Tools that ignore cancellation",
        "Requests still running more than cancel_grace (default 5 s) after their "
        "cancellation, by tool, right now. The tool keeps burning CPU and tokens for a "
        "caller that gave up: make it poll cancelled(). Only registered tool names appear; "
        "anything else is other.",
        "short",
        (
            Target(
                f"sort_desc(sum by (tool) ({metric('ignored_cancellations')}) > 0)",
                "{{tool}}",
                True,
            ),
        ),
        thresholds=(("green", None), ("orange", 1)),
        no_value="None",
    ),
    Panel(
        "timeseries",
        "Ignored cancellations per minute by tool",
        "Cancelled requests that ran past cancel_grace, counted when they ended, by tool.",
        "short",
        (
            Target(
                f"sum by (tool) (rate({metric('cancellations_ignored_total')}[{RATE}])) * 60",
                "{{tool}}",
            ),
        ),
        no_value="None",
    ),
    Row("Tasks"),
    Panel(
        "timeseries",
        "Tasks created and ended per second",
        "Tasks (SEP-2663) created, and ended by final status, per second, all tools.",
        "ops",
        (
            Target(f"sum(rate({metric('tasks_created_total')}[{RATE}]))", "created"),
            Target(
                f"sum by (status) (rate({metric('tasks_ended_total')}[{RATE}]))",
                "{{status}}",
            ),
        ),
        w=8,
        no_value="No task",
    ),
    Panel(
        "timeseries",
        "Tasks running by tool",
        "Tasks whose tool runs now, by tool, summed over the processes that run them.",
        "short",
        (Target(f"sum by (tool) ({per_table('tasks_running', 'tool')})", "{{tool}}"),),
        w=8,
        no_value="No task",
    ),
    Panel(
        "timeseries",
        "Task duration by tool",
        "How long tasks ran from creation to their end, by tool: the 95th percentile and the mean.",
        "s",
        (
            Target(
                "histogram_quantile(0.95, sum by (le, tool) "
                f"(rate({metric('task_duration_seconds_bucket')}[{RATE}])))",
                "p95 {{tool}}",
            ),
            Target(
                f"sum by (tool) (rate({metric('task_duration_seconds_sum')}[{RATE}])) "
                f"/ sum by (tool) (rate({metric('task_duration_seconds_count')}[{RATE}]))",
                "mean {{tool}}",
            ),
        ),
        w=8,
        no_value="No task ended",
    ),
    Panel(
        "timeseries",
        "Calls refused as tasks",
        "Calls that ran as plain calls because their scope held its task quota, or the task "
        "table did not answer, per second (the scopes: Abusive scopes).",
        "ops",
        (
            Target(
                f"sum by (reason) (rate({metric('tasks_rejected_total')}[{RATE}]))",
                "{{reason}}",
            ),
        ),
        no_value="None",
        links=TO_ABUSIVE,
    ),
    Panel(
        "timeseries",
        "Share of tasks failing",
        "Failed tasks against every ended task, by tool (a worker that died, an error, a "
        "result over max_result_bytes).",
        "percentunit",
        (
            Target(
                f"sum by (tool) (rate({metric('tasks_ended_total', FAILED)}[{RATE}])) "
                f"/ sum by (tool) (rate({metric('tasks_ended_total')}[{RATE}]))",
                "{{tool}}",
            ),
        ),
        max=1,
        no_value="No task ended",
    ),
)
