"""What a panel is, and the query helpers both dashboards' panels are written with: the
selector is left as a placeholder that generation fills from the
:class:`~.config.DashboardConfig` (private).

Table-state gauges (rows, in_flight, scope_rows, max_rows, max_rows_per_scope) are the
same in every process that shares one storage: every query of them takes
``max by (storage, ...)`` across processes before it sums, so that a table shared by N
pods is counted once (the end-to-end test checks that every query naming only table-state
gauges reads the same whether one pod or all are selected).
"""

from __future__ import annotations

import dataclasses

__all__ = [
    "ABUSIVE_UID",
    "OVERVIEW_UID",
    "SELECTOR",
    "Panel",
    "Row",
    "Target",
    "fill",
    "metric",
    "operations",
    "per_table",
    "stat",
    "table",
]

#: Stands for the configured label selector inside every query until generation.
SELECTOR = "__MCP_CANCELLATION_SELECTOR__"
#: The range of every rate: Grafana's, which follows the scrape interval.
RATE = "$__rate_interval"
#: Narrows table-state gauges to the tables picked in the ``storage`` variable.
STORAGE = 'storage=~"$storage"'

OVERVIEW_UID = "mcp-cancellation-overview"
ABUSIVE_UID = "mcp-cancellation-abusive-scopes"


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
    #: Shown as this column name in a table panel.
    column: str = ""


@dataclasses.dataclass(frozen=True)
class Panel:
    kind: str  # timeseries | stat | gauge | bargauge | table | heatmap
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
    #: What the panel shows when its queries return nothing ("nothing happened").
    no_value: str | None = None
    #: (title, dashboard uid): links that carry the time range and the variables.
    links: tuple[tuple[str, str], ...] = ()


@dataclasses.dataclass(frozen=True)
class Row:
    """A collapsible row: the panels after it, up to the next row, belong to it."""

    title: str
    collapsed: bool = False


def metric(name: str, extra: str = "") -> str:
    """Metric *name*, filtered by the configured selector (and *extra* matchers)."""
    return f"mcp_cancellation_{name}{{{SELECTOR}{', ' + extra if extra else ''}}}"


def operations(suffix: str, extra: str = "") -> str:
    """A series of the standard ``mcp_server_operation_duration_seconds`` histogram
    (*suffix*: ``bucket``, ``sum`` or ``count``) of tool calls, filtered by the selector."""
    matchers = f'{SELECTOR}, mcp_method_name="tools/call"' + (", " + extra if extra else "")
    return f"mcp_server_operation_duration_seconds_{suffix}{{{matchers}}}"


def table(name: str, extra: str = "") -> str:
    """A table-state gauge, also narrowed to the selected storages."""
    return metric(name, STORAGE + (", " + extra if extra else ""))


def per_table(name: str, by: str = "") -> str:
    """A table-state gauge summed per process, then read once per table: the same value
    from every process that shares the storage (``max``), grouped by ``storage`` and *by*."""
    groups = "storage" + (", " + by if by else "")
    return f"max by ({groups}) (sum by (job, instance, {groups}) ({table(name)}))"


def stat(
    title: str,
    description: str,
    *targets: Target,
    thresholds: tuple[tuple[str, float | None], ...] = (("green", None),),
    no_value: str | None = "0",
) -> Panel:
    """A small number panel of the top row (6 x 5, "0" when nothing happened)."""
    return Panel(
        "stat",
        title,
        description,
        "short",
        targets,
        w=6,
        h=5,
        thresholds=thresholds,
        no_value=no_value,
    )
