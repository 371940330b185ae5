"""The panels of both dashboards, with the selector left as a placeholder that
generation fills from the :class:`~.config.DashboardConfig` (private)."""

from __future__ import annotations

import dataclasses

__all__ = ["ABUSIVE", "DASHBOARDS", "OVERVIEW", "SELECTOR", "Panel", "Target", "fill"]

#: Stands for the configured label selector inside every query until generation.
SELECTOR = "__MCP_CANCELLATION_SELECTOR__"
#: The range of every rate: Grafana's, which follows the scrape interval.
RATE = "$__rate_interval"


def fill(expr: str, selector: str) -> str:
    """*expr* with the placeholder replaced by *selector* (which may be empty)."""
    if not selector:
        return expr.replace(SELECTOR + ", ", "").replace(SELECTOR, "")
    return expr.replace(SELECTOR, selector)


@dataclasses.dataclass(frozen=True)
class Target:
    expr: str
    legend: str = ""
    instant: bool = False


@dataclasses.dataclass(frozen=True)
class Panel:
    kind: str  # timeseries | stat | gauge | bargauge
    title: str
    description: str
    unit: str
    targets: tuple[Target, ...]
    w: int = 12
    h: int = 8
    min: float | None = 0
    max: float | None = None
    thresholds: tuple[tuple[str, float | None], ...] = (("green", None),)
    stack: bool = False


def metric(name: str, extra: str = "") -> str:
    """Metric *name*, filtered by the configured selector (and *extra* matchers)."""
    return f"mcp_cancellation_{name}{{{SELECTOR}{', ' + extra if extra else ''}}}"


#: Matchers of the two rejection reasons, and the colours of a filling table.
QUOTA = 'reason="quota"'
INVALID = 'reason="invalid_request_id"'
FILL = (("green", None), ("orange", 0.8), ("red", 0.95))

OVERVIEW: tuple[Panel, ...] = (
    Panel(
        "stat",
        "Rows held",
        "Cancellation rows currently stored, all scopes (per instance: with a shared Redis "
        "storage every instance reports the same table).",
        "short",
        (Target(f"sum by (instance) ({metric('rows')})", "{{instance}}"),),
        w=6,
        h=5,
    ),
    Panel(
        "gauge",
        "Table fill",
        "Rows against the global cap max_rows. At 100% every new cancellation evicts a batch "
        "of rows, largest scope first.",
        "percentunit",
        (
            Target(
                f"sum by (job, instance) ({metric('rows')}) / on (job, instance) "
                f"max by (job, instance) ({metric('max_rows')})",
                "{{instance}}",
            ),
        ),
        w=6,
        h=5,
        max=1,
        thresholds=FILL,
    ),
    Panel(
        "stat",
        "Requests in flight",
        "Requests tracked by the middleware right now (they can be cancelled).",
        "short",
        (Target(f"sum by (instance) ({metric('in_flight')})", "{{instance}}"),),
        w=6,
        h=5,
    ),
    Panel(
        "stat",
        "Limits",
        "The configured global cap (max_rows) and per-scope quota (max_rows_per_scope).",
        "short",
        (
            Target(f"max({metric('max_rows')})", "max_rows"),
            Target(f"max({metric('max_rows_per_scope')})", "max_rows_per_scope"),
        ),
        w=6,
        h=5,
    ),
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
    ),
    Panel(
        "timeseries",
        "Table fill against max_rows",
        "Rows held per instance and the cap they evict at.",
        "short",
        (
            Target(f"sum by (instance) ({metric('rows')})", "rows {{instance}}"),
            Target(f"max by (instance) ({metric('max_rows')})", "max_rows {{instance}}"),
        ),
    ),
    Panel(
        "timeseries",
        "Rows by scope kind",
        "Where the rows are: session, principal, ip, global (library callers) or other.",
        "short",
        (Target(f"sum by (scope_kind) ({metric('rows')})", "{{scope_kind}}"),),
        stack=True,
    ),
    Panel(
        "timeseries",
        "In-flight requests by scope kind",
        "Requests being served that a cancellation could reach.",
        "short",
        (Target(f"sum by (scope_kind) ({metric('in_flight')})", "{{scope_kind}}"),),
        stack=True,
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
    ),
    Panel(
        "timeseries",
        "Rejections per second",
        "Cancellations refused: quota (the caller's scope already holds max_rows_per_scope "
        "rows, answered -32000) by scope kind, and invalid request ids (answered -32602).",
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
        ),
        stack=True,
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
        w=24,
    ),
)

ABUSIVE: tuple[Panel, ...] = (
    Panel(
        "bargauge",
        "Top scopes by rows",
        "The scopes holding the most cancellation rows right now (the exporter keeps the top K "
        "only; session scopes are shown as a short hash).",
        "short",
        (
            Target(
                f"sort_desc(topk(10, max by (scope) ({metric('scope_rows')})))", "{{scope}}", True
            ),
        ),
    ),
    Panel(
        "bargauge",
        "Scopes at or near their quota",
        "Rows of each top scope divided by max_rows_per_scope. At 100% the scope's further "
        "cancellations are rejected until its requests finish.",
        "percentunit",
        (
            Target(
                f"sort_desc(topk(10, max by (scope) ({metric('scope_rows')} / on (job, instance) "
                f"group_left max by (job, instance) ({metric('max_rows_per_scope')}))))",
                "{{scope}}",
                True,
            ),
        ),
        max=1,
        thresholds=(("green", None), ("orange", 0.5), ("red", 0.9)),
    ),
    Panel(
        "bargauge",
        "Top rejected scopes",
        "Scopes with the most rejected cancellations, from a bounded heavy-hitters summary "
        "(approximate counts; a flood from many addresses cannot add series).",
        "short",
        (
            Target(
                f"sort_desc(topk(10, max by (scope) ({metric('scope_rejections')})))",
                "{{scope}}",
                True,
            ),
        ),
        thresholds=(("green", None), ("orange", 1), ("red", 100)),
    ),
    Panel(
        "timeseries",
        "Rejection rate by scope kind",
        "Rejected cancellations per second by scope kind and reason (quota or invalid_request_id).",
        "ops",
        (
            Target(
                f"sum by (scope_kind, reason) (rate({metric('rejected_total')}[{RATE}]))",
                "{{scope_kind}} {{reason}}",
            ),
        ),
    ),
    Panel(
        "timeseries",
        "Share of the table held by the largest scopes",
        "Fraction of each instance's rows held by its largest scope and by its 5 largest. "
        "Near 100% one caller owns the table: it is the first evicted when the cap is hit, "
        "and the alert for a scope pinned at its quota names it.",
        "percentunit",
        (
            Target(
                f"sum by (job, instance) (topk by (job, instance) (1, {metric('scope_rows')})) "
                f"/ on (job, instance) sum by (job, instance) ({metric('rows')})",
                "largest scope {{instance}}",
            ),
            Target(
                f"sum by (job, instance) (topk by (job, instance) (5, {metric('scope_rows')})) "
                f"/ on (job, instance) sum by (job, instance) ({metric('rows')})",
                "5 largest scopes {{instance}}",
            ),
        ),
        max=1,
    ),
    Panel(
        "timeseries",
        "Top scopes by rows over time",
        "The same top scopes as above, over time: a scope that stays flat at the quota is "
        "hogging it; well-behaved callers come and go.",
        "short",
        (Target(f"topk(10, max by (scope) ({metric('scope_rows')}))", "{{scope}}"),),
    ),
)

#: file name -> (uid, title, panels)
DASHBOARDS: dict[str, tuple[str, str, tuple[Panel, ...]]] = {
    "overview.json": ("mcp-cancellation-overview", "MCP cancellation — overview", OVERVIEW),
    "abusive-scopes.json": (
        "mcp-cancellation-abusive-scopes",
        "MCP cancellation — abusive scopes",
        ABUSIVE,
    ),
}
