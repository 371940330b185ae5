"""Generation: the Grafana JSON model of each dashboard, from the panels and a config."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from ._panels import DASHBOARDS, Panel, fill
from .config import DEFAULT, SCHEMA_VERSION, DashboardConfig

__all__ = ["build_dashboard", "dashboards", "render"]


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
        query_var("job", "Job", "label_values(mcp_cancellation_max_rows_per_scope, job)"),
        query_var(
            "instance",
            "Instance",
            'label_values(mcp_cancellation_max_rows_per_scope{job=~"$job"}, instance)',
        ),
    ]


def _panel_json(
    panel: Panel, panel_id: int, x: int, y: int, config: DashboardConfig
) -> dict[str, Any]:
    targets = []
    for index, target in enumerate(panel.targets):
        targets.append(
            {
                "datasource": config.datasource_ref,
                "editorMode": "code",
                "expr": fill(target.expr, config.selector),
                "legendFormat": target.legend or "__auto",
                "instant": target.instant,
                "range": not target.instant,
                "refId": chr(ord("A") + index),
            }
        )
    defaults: dict[str, Any] = {
        "unit": panel.unit,
        "color": {"mode": "palette-classic" if panel.kind == "timeseries" else "thresholds"},
        "thresholds": {
            "mode": "absolute",
            "steps": [{"color": color, "value": value} for color, value in panel.thresholds],
        },
    }
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
    else:
        reduce = {"calcs": ["lastNotNull"], "fields": "", "values": False}
        options = {"reduceOptions": reduce, "orientation": "auto"}
        if panel.kind == "stat":
            options.update(colorMode="value", graphMode="area", textMode="value_and_name")
        elif panel.kind == "bargauge":
            options.update(displayMode="gradient", orientation="horizontal", showUnfilled=True)
        else:
            options.update(showThresholdMarkers=True, showThresholdLabels=False)
    return {
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


def build_dashboard(
    uid: str, title: str, panels: Iterable[Panel], config: DashboardConfig = DEFAULT
) -> dict[str, Any]:
    """The Grafana JSON model of one dashboard (importable as it is)."""
    laid_out: list[dict[str, Any]] = []
    x = y = row_h = 0
    for panel_id, panel in enumerate(panels, start=1):
        if x + panel.w > 24:
            x, y, row_h = 0, y + row_h, 0
        laid_out.append(_panel_json(panel, panel_id, x, y, config))
        x += panel.w
        row_h = max(row_h, panel.h)
    others = [u for u, _, _ in DASHBOARDS.values() if u != uid]
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
        "links": [
            {
                "asDropdown": False,
                "icon": "dashboard",
                "includeVars": True,
                "keepTime": True,
                "tags": ["mcp-cancellation"],
                "targetBlank": False,
                "title": "MCP cancellation",
                "type": "dashboards",
            }
        ]
        if others
        else [],
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
