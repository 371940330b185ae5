"""Generation: the Grafana JSON model of each dashboard, from the panels and a config."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from ._abusive import ABUSIVE
from ._config import DEFAULT, SCHEMA_VERSION, DashboardConfig
from ._overview import OVERVIEW
from ._panels import ABUSIVE_UID, OVERVIEW_UID, Panel, Row, fill

__all__ = ["DASHBOARDS", "build_dashboard", "dashboards", "render"]

#: file name -> (uid, title, panels)
DASHBOARDS: dict[str, tuple[str, str, tuple[Panel | Row, ...]]] = {
    "overview.json": (OVERVIEW_UID, "MCP cancellation — overview", OVERVIEW),
    "abusive-scopes.json": (ABUSIVE_UID, "MCP cancellation — abusive scopes", ABUSIVE),
}


def _variables(config: DashboardConfig) -> list[dict[str, Any]]:
    def query_var(name: str, label: str, query: str) -> dict[str, Any]:
        return {
            "name": name,
            "label": label,
            "type": "query",
            "datasource": config.datasource_ref,
            "definition": query,
            "query": {"query": query, "refId": f"{name}-variable"},
            "refresh": 2,
            "includeAll": True,
            "multi": True,
            "allValue": ".+",
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
            "options": [],
            "regex": "",
            "sort": 1,
            "hide": 0,
        }

    # The job and instance variables exist only while the selector uses them (a selector
    # such as job="mcp" leaves them out: a control that changes nothing confuses).
    selector = config.selector
    uses_job = "$job" in selector
    return [
        {
            "name": "datasource",
            "label": "Data source",
            "type": "datasource",
            "query": "prometheus",
            "current": {},
            "options": [],
            "regex": "",
            "refresh": 1,
            "includeAll": False,
            "multi": False,
            "hide": 0,
        },
        *(
            [query_var("job", "Job", "label_values(mcp_cancellation_max_rows_per_scope, job)")]
            if uses_job
            else []
        ),
        *(
            [
                query_var(
                    "instance",
                    "Instance",
                    "label_values(mcp_cancellation_max_rows_per_scope"
                    + ('{job=~"$job"}' if uses_job else "")
                    + ", instance)",
                )
            ]
            if "$instance" in selector
            else []
        ),
        query_var(
            "storage",
            "Table",
            f"label_values(mcp_cancellation_storage_up{{{selector}}}, storage)"
            if selector
            else "label_values(mcp_cancellation_storage_up, storage)",
        ),
    ]


def _link(title: str, uid: str) -> dict[str, Any]:
    """A link to another dashboard that keeps the time range and the variables."""
    return {
        "title": title,
        "type": "link",
        "url": f"/d/{uid}",
        "icon": "dashboard",
        "tooltip": f"Open the {title.lower()} dashboard with this time range and selection",
        "includeVars": True,
        "keepTime": True,
        "asDropdown": False,
        "targetBlank": False,
        "tags": [],
    }


def _panel_link(title: str, uid: str) -> dict[str, Any]:
    return {
        "title": title,
        "url": f"/d/{uid}?${{__url_time_range}}&${{__all_variables}}",
        "targetBlank": False,
    }


def _panel_json(
    panel: Panel, panel_id: int, x: int, y: int, config: DashboardConfig
) -> dict[str, Any]:
    targets = []
    for index, target in enumerate(panel.targets):
        query: dict[str, Any] = {
            "datasource": config.datasource_ref,
            "editorMode": "code",
            "expr": fill(target.expr, config.selector),
            "legendFormat": target.legend or "__auto",
            "instant": target.instant,
            "range": not target.instant,
            "refId": chr(ord("A") + index),
        }
        if panel.kind == "table":
            query["format"] = "table"
        elif panel.kind == "heatmap":
            query["format"] = "heatmap"
        targets.append(query)
    defaults: dict[str, Any] = {
        "unit": panel.unit,
        "color": {"mode": "palette-classic" if panel.kind == "timeseries" else "thresholds"},
        "thresholds": {
            "mode": "absolute",
            "steps": [{"color": color, "value": value} for color, value in panel.thresholds],
        },
    }
    if panel.no_value is not None:
        defaults["noValue"] = panel.no_value
    if panel.min is not None:
        defaults["min"] = panel.min
    if panel.max is not None:
        defaults["max"] = panel.max
    options: dict[str, Any]
    if panel.kind == "timeseries":
        defaults["custom"] = {
            "drawStyle": "line",
            "lineWidth": 1,
            "fillOpacity": 20 if panel.stack else 0,
            "showPoints": "never",
            "spanNulls": False,
            "stacking": {"mode": "normal" if panel.stack else "none", "group": "A"},
        }
        options = {
            "legend": {
                "displayMode": "table",
                "placement": "bottom",
                "showLegend": True,
                "calcs": ["mean", "max", "lastNotNull"],
            },
            "tooltip": {"mode": "multi", "sort": "desc"},
        }
    elif panel.kind == "table":
        options = {"showHeader": True, "cellHeight": "sm", "footer": {"show": False}}
    elif panel.kind == "heatmap":
        # The buckets are already counted (a Prometheus histogram): no calculation.
        options = {
            "calculate": False,
            "yAxis": {"unit": panel.unit, "axisPlacement": "left"},
            "color": {"mode": "scheme", "scheme": "Oranges", "exponent": 0.5},
            "cellGap": 1,
            "tooltip": {"show": True, "yHistogram": True},
            "legend": {"show": True},
        }
    else:
        reduce = {"calcs": ["lastNotNull"], "fields": "", "values": False}
        options = {"reduceOptions": reduce, "orientation": "auto"}
        if panel.kind == "stat":
            options.update(colorMode="value", graphMode="area", textMode="value_and_name")
        elif panel.kind == "bargauge":
            options.update(displayMode="gradient", orientation="horizontal", showUnfilled=True)
        else:
            options.update(showThresholdMarkers=True, showThresholdLabels=False)
    document: dict[str, Any] = {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": config.datasource_ref,
        "gridPos": {"h": panel.h, "w": panel.w, "x": x, "y": y},
        "targets": targets,
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": options,
    }
    if panel.links:
        document["links"] = [_panel_link(title, uid) for title, uid in panel.links]
    if panel.kind == "table":
        document["transformations"] = _table_transformations(panel)
    return document


def _table_transformations(panel: Panel) -> list[dict[str, Any]]:
    """One line per storage: the instant queries merged on their labels, each value column
    named after its target, the time column hidden."""
    names = {"storage": "Table"}
    order = {"storage": 0}
    for index, target in enumerate(panel.targets, start=1):
        names[f"Value #{chr(ord('A') + index - 1)}"] = target.column
        order[f"Value #{chr(ord('A') + index - 1)}"] = index
    return [
        {"id": "merge", "options": {}},
        {
            "id": "organize",
            "options": {
                "excludeByName": {"Time": True},
                "indexByName": order,
                "renameByName": names,
            },
        },
    ]


def _row_json(row: Row, panel_id: int, y: int, children: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": panel_id,
        "type": "row",
        "title": row.title,
        "collapsed": row.collapsed,
        "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
        "panels": children if row.collapsed else [],
    }


def build_dashboard(
    uid: str, title: str, panels: Iterable[Panel | Row], config: DashboardConfig = DEFAULT
) -> dict[str, Any]:
    """The Grafana JSON model of one dashboard (importable as it is)."""
    laid_out: list[dict[str, Any]] = []
    x = y = row_h = 0
    children: list[dict[str, Any]] = laid_out  # where the current row's panels go
    for panel_id, panel in enumerate(panels, start=1):
        if isinstance(panel, Row):
            x, y, row_h = 0, y + row_h, 0
            row_children: list[dict[str, Any]] = []
            laid_out.append(_row_json(panel, panel_id, y, row_children))
            children = row_children if panel.collapsed else laid_out
            y += 1
            continue
        if x + panel.w > 24:
            x, y, row_h = 0, y + row_h, 0
        children.append(_panel_json(panel, panel_id, x, y, config))
        x += panel.w
        row_h = max(row_h, panel.h)
    others = [(t, u) for u, t, _ in DASHBOARDS.values() if u != uid]
    return {
        "annotations": {
            "list": [
                {
                    "builtIn": 1,
                    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                    "enable": True,
                    "hide": True,
                    "iconColor": "rgba(0, 211, 255, 1)",
                    "name": "Annotations & Alerts",
                    "type": "dashboard",
                }
            ]
        },
        "description": "Cancellation registry of MCP servers using mcp-cancellation: "
        "see docs/dashboards.md.",
        "editable": True,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "id": None,
        "links": [_link(title.split(" — ")[-1].capitalize(), other) for title, other in others],
        "liveNow": False,
        "panels": laid_out,
        "refresh": "30s",
        "schemaVersion": SCHEMA_VERSION,
        "tags": ["mcp", "mcp-cancellation"],
        "templating": {"list": _variables(config)},
        "time": {"from": "now-1h", "to": "now"},
        "timepicker": {},
        "timezone": "browser",
        "title": title,
        "uid": uid,
        "version": 1,
        "weekStart": "",
    }


def render(document: Mapping[str, Any]) -> str:
    """The exact text written to disk (stable, so the check can compare bytes)."""
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def dashboards(config: DashboardConfig = DEFAULT) -> dict[str, str]:
    """Every dashboard's file name and exact text under *config*."""
    return {
        name: render(build_dashboard(uid, title, panels, config))
        for name, (uid, title, panels) in DASHBOARDS.items()
    }
