"""The abusive-scopes dashboard's panels: the largest scopes and who is rejected
(private; see :mod:`._panels`)."""

from __future__ import annotations

from ._panels import OVERVIEW_UID, RATE, Panel, Row, Target, metric, per_table, table

__all__ = ["ABUSIVE"]

TO_OVERVIEW = (("Overview", OVERVIEW_UID),)

ABUSIVE: tuple[Panel | Row, ...] = (
    Row("Who holds the table"),
    Panel(
        "bargauge",
        "Top scopes by rows",
        "The scopes holding the most cancellation rows right now (the exporter keeps the top K "
        "only; session scopes are shown as a short hash).",
        "short",
        (
            Target(
                f"sort_desc(topk(10, max by (scope) ({table('scope_rows')})))",
                "{{scope}}",
                True,
            ),
        ),
        no_value="No scope holds rows",
    ),
    Panel(
        "bargauge",
        "Scopes at or near their quota",
        "Rows of each top scope divided by max_rows_per_scope. At 100% the scope's further "
        "cancellations are rejected until its requests finish.",
        "percentunit",
        (
            Target(
                f"sort_desc(topk(10, max by (scope) ({table('scope_rows')} / on (job, instance, "
                f"storage) group_left {table('max_rows_per_scope')})))",
                "{{scope}}",
                True,
            ),
        ),
        max=1,
        thresholds=(("green", None), ("orange", 0.5), ("red", 0.9)),
        no_value="No scope holds rows",
    ),
    Panel(
        "timeseries",
        "Share of the table held by the largest scopes",
        "Fraction of each table's rows held by its largest scope and by its 5 largest. Near "
        "100% one caller owns the table: it is the first evicted when the cap is hit, and the "
        "alert for a scope pinned at its quota names it.",
        "percentunit",
        (
            Target(
                "max by (storage) (topk by (job, instance, storage) (1, "
                f"{table('scope_rows')})) / on (storage) {per_table('rows')}",
                "largest scope {{storage}}",
            ),
            Target(
                "max by (storage) (sum by (job, instance, storage) (topk by (job, instance, "
                f"storage) (5, {table('scope_rows')}))) / on (storage) {per_table('rows')}",
                "5 largest scopes {{storage}}",
            ),
        ),
        max=1,
        no_value="The table is empty",
    ),
    Panel(
        "timeseries",
        "Top scopes by rows over time",
        "The same top scopes as above, over time: a scope that stays flat at the quota is "
        "hogging it; well-behaved callers come and go.",
        "short",
        (Target(f"topk(10, max by (scope) ({table('scope_rows')}))", "{{scope}}"),),
        no_value="No scope holds rows",
    ),
    Row("Who is refused"),
    Panel(
        "bargauge",
        "Top rejected scopes",
        "Scopes with the most rejections since each process started, by reason (quota, "
        "invalid_request_id: cancellations; task_quota: calls that could not be tasks), "
        "from a bounded heavy-hitters summary (counts are upper bounds; only scopes certainly "
        "among the top K are exported, so a flood from many addresses cannot add series).",
        "short",
        (
            Target(
                f"sort_desc(topk(10, sum by (scope, reason) ({metric('scope_rejections')})))",
                "{{scope}} ({{reason}})",
                True,
            ),
        ),
        thresholds=(("green", None), ("orange", 1), ("red", 100)),
        no_value="No rejections",
    ),
    Panel(
        "timeseries",
        "Rejection rate by scope kind",
        "Rejected cancellations per second by scope kind and reason (quota or invalid_request_id).",
        "ops",
        (
            Target(
                f"sum by (scope_kind, reason, mode) (rate({metric('rejected_total')}[{RATE}]))",
                "{{scope_kind}} {{reason}} ({{mode}})",
            ),
        ),
        no_value="No rejections",
        links=TO_OVERVIEW,
    ),
    Panel(
        "timeseries",
        "Task rejections by scope kind",
        "Calls that could have been tasks and ran as plain calls, per second, by scope kind "
        "and reason: quota (the scope holds max_tasks_per_scope tasks), full (the table "
        "holds max_tasks tasks: every scope is refused), unavailable (the task table did "
        "not answer) or shutdown (the server is stopping). The scopes themselves are in "
        "Top rejected scopes (task_quota).",
        "ops",
        (
            Target(
                f"sum by (scope_kind, reason) (rate({metric('tasks_rejected_total')}[{RATE}]))",
                "{{scope_kind}} {{reason}}",
            ),
        ),
        no_value="No task rejections",
    ),
)
