"""Grafana dashboards and Prometheus alert rules: generated here, validated here.

The two dashboards in ``dashboards/`` are generated from the panel lists below, so every
panel follows the same rules (a ``datasource`` variable of type prometheus, ``job`` and
``instance`` filters, ``$__rate_interval`` in every rate, a unit on every panel) and every
metric named is one the package exports. ``dashboards/alerts.yaml`` is written by hand (it
is read by people) and checked by :func:`check_rules`.

Regenerate after editing this module, or check that the committed files are current::

    python -m mcp_cancellation._dashboards            # rewrite dashboards/*.json
    python -m mcp_cancellation._dashboards --check    # exit 1 if stale or invalid

Nothing in the package imports this module; it ships so the dashboards can be rebuilt (for
example with another ``job`` label) from an installed copy.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "DASHBOARDS",
    "RUNBOOK_BASE",
    "SCHEMA_VERSION",
    "PanelQuery",
    "build",
    "build_dashboard",
    "check_dashboard",
    "check_rules",
    "github_anchor",
    "known_metric_names",
    "main",
    "metric_names_in",
    "panel_queries",
    "render",
    "substitute",
]

#: Where alert annotations point (the project's docs/alerts.md, rendered by GitHub).
RUNBOOK_BASE = "https://github.com/mcp-cancellation/mcp-cancellation/blob/main/docs/alerts.md"
#: Oldest Grafana dashboard schema the files claim (Grafana 10.4 writes 39).
SCHEMA_VERSION = 39

_DS = {"type": "prometheus", "uid": "${datasource}"}
_SEL = 'job=~"$job", instance=~"$instance"'
_RATE = "$__rate_interval"

_METRIC = re.compile(r"\bmcp_cancellation_[a-zA-Z0-9_]*[a-zA-Z0-9]")
_RANGE = re.compile(r"\[([^\]]*)\]")


# ---------------------------------------------------------------------------------------
# Panels


@dataclasses.dataclass(frozen=True)
class _Target:
    expr: str
    legend: str = ""
    instant: bool = False


@dataclasses.dataclass(frozen=True)
class _Panel:
    kind: str  # timeseries | stat | gauge | bargauge
    title: str
    description: str
    unit: str
    targets: tuple[_Target, ...]
    w: int = 12
    h: int = 8
    min: float | None = 0
    max: float | None = None
    thresholds: tuple[tuple[str, float | None], ...] = (("green", None),)
    stack: bool = False


def _m(name: str, extra: str = "") -> str:
    """A selector of metric *name* filtered by the dashboard's job and instance variables."""
    return f"mcp_cancellation_{name}{{{_SEL}{', ' + extra if extra else ''}}}"


_QUOTA = 'reason="quota"'
_INVALID = 'reason="invalid_request_id"'
_FILL = (("green", None), ("orange", 0.8), ("red", 0.95))

OVERVIEW: tuple[_Panel, ...] = (
    _Panel(
        "stat",
        "Rows held",
        "Cancellation rows currently stored, all scopes (per instance: with a shared Redis "
        "storage every instance reports the same table).",
        "short",
        (_Target(f"sum by (instance) ({_m('rows')})", "{{instance}}"),),
        w=6,
        h=5,
    ),
    _Panel(
        "gauge",
        "Table fill",
        "Rows against the global cap max_rows. At 100% every new cancellation evicts a batch "
        "of rows, largest scope first.",
        "percentunit",
        (
            _Target(
                f"sum by (job, instance) ({_m('rows')}) / on (job, instance) "
                f"max by (job, instance) ({_m('max_rows')})",
                "{{instance}}",
            ),
        ),
        w=6,
        h=5,
        max=1,
        thresholds=_FILL,
    ),
    _Panel(
        "stat",
        "Requests in flight",
        "Requests tracked by the middleware right now (they can be cancelled).",
        "short",
        (_Target(f"sum by (instance) ({_m('in_flight')})", "{{instance}}"),),
        w=6,
        h=5,
    ),
    _Panel(
        "stat",
        "Limits",
        "The configured global cap (max_rows) and per-scope quota (max_rows_per_scope).",
        "short",
        (
            _Target(f"max({_m('max_rows')})", "max_rows"),
            _Target(f"max({_m('max_rows_per_scope')})", "max_rows_per_scope"),
        ),
        w=6,
        h=5,
    ),
    _Panel(
        "timeseries",
        "Cancellations per second by scope kind",
        "Cancellations recorded (a notifications/cancelled for a request in flight in the "
        "caller's own scope, or a client disconnect). Ignored notifications (unknown ids, "
        "other callers' ids) are not counted: that is the isolation working.",
        "ops",
        (
            _Target(
                f"sum by (scope_kind) (rate({_m('cancelled_total')}[{_RATE}]))",
                "{{scope_kind}}",
            ),
        ),
        stack=True,
    ),
    _Panel(
        "timeseries",
        "Table fill against max_rows",
        "Rows held per instance and the cap they evict at.",
        "short",
        (
            _Target(f"sum by (instance) ({_m('rows')})", "rows {{instance}}"),
            _Target(f"max by (instance) ({_m('max_rows')})", "max_rows {{instance}}"),
        ),
    ),
    _Panel(
        "timeseries",
        "Rows by scope kind",
        "Where the rows are: session, principal, ip, global (library callers) or other.",
        "short",
        (_Target(f"sum by (scope_kind) ({_m('rows')})", "{{scope_kind}}"),),
        stack=True,
    ),
    _Panel(
        "timeseries",
        "In-flight requests by scope kind",
        "Requests being served that a cancellation could reach.",
        "short",
        (_Target(f"sum by (scope_kind) ({_m('in_flight')})", "{{scope_kind}}"),),
        stack=True,
    ),
    _Panel(
        "timeseries",
        "Evictions per second by scope kind",
        "Rows dropped because the table reached max_rows. Evicted cancellations are lost (the "
        "tool already saw its flag, but a later check of the row finds nothing). Sustained "
        "evictions mean the cap is too small or someone is filling it.",
        "ops",
        (
            _Target(
                f"sum by (scope_kind) (rate({_m('evicted_total')}[{_RATE}]))",
                "{{scope_kind}}",
            ),
        ),
        stack=True,
    ),
    _Panel(
        "timeseries",
        "Rejections per second",
        "Cancellations refused: quota (the caller's scope already holds max_rows_per_scope "
        "rows, answered -32000) by scope kind, and invalid request ids (answered -32602).",
        "ops",
        (
            _Target(
                f"sum by (scope_kind) (rate({_m('rejected_total', _QUOTA)}[{_RATE}]))",
                "quota {{scope_kind}}",
            ),
            _Target(
                f"sum(rate({_m('rejected_total', _INVALID)}[{_RATE}]))",
                "invalid request id",
            ),
        ),
        stack=True,
    ),
    _Panel(
        "timeseries",
        "Cleanup removals per second",
        "Rows the janitor removed: expired cancellations (older than the ttl) and in-flight "
        "rows whose owner is gone (a crashed worker). Steady in-flight removals point at "
        "requests that end without the middleware's finally running.",
        "ops",
        (
            _Target(
                f"sum by (table) (rate({_m('cleanup_removed_total')}[{_RATE}]))",
                "{{table}}",
            ),
        ),
        w=24,
    ),
)

ABUSIVE: tuple[_Panel, ...] = (
    _Panel(
        "bargauge",
        "Top scopes by rows",
        "The scopes holding the most cancellation rows right now (the exporter keeps the top K "
        "only; session scopes are shown as a short hash).",
        "short",
        (_Target(f"sort_desc(topk(10, max by (scope) ({_m('scope_rows')})))", "{{scope}}", True),),
    ),
    _Panel(
        "bargauge",
        "Scopes at or near their quota",
        "Rows of each top scope divided by max_rows_per_scope. At 100% the scope's further "
        "cancellations are rejected until its requests finish.",
        "percentunit",
        (
            _Target(
                f"sort_desc(topk(10, max by (scope) ({_m('scope_rows')} / on (job, instance) "
                f"group_left max by (job, instance) ({_m('max_rows_per_scope')}))))",
                "{{scope}}",
                True,
            ),
        ),
        max=1,
        thresholds=(("green", None), ("orange", 0.5), ("red", 0.9)),
    ),
    _Panel(
        "bargauge",
        "Top rejected scopes",
        "Scopes with the most rejected cancellations, from a bounded heavy-hitters summary "
        "(approximate counts; a flood from many addresses cannot add series).",
        "short",
        (
            _Target(
                f"sort_desc(topk(10, max by (scope) ({_m('scope_rejections')})))",
                "{{scope}}",
                True,
            ),
        ),
        thresholds=(("green", None), ("orange", 1), ("red", 100)),
    ),
    _Panel(
        "timeseries",
        "Rejection rate by scope kind",
        "Rejected cancellations per second by scope kind and reason (quota or invalid_request_id).",
        "ops",
        (
            _Target(
                f"sum by (scope_kind, reason) (rate({_m('rejected_total')}[{_RATE}]))",
                "{{scope_kind}} {{reason}}",
            ),
        ),
    ),
    _Panel(
        "timeseries",
        "Share of the table held by the largest scopes",
        "Fraction of each instance's rows held by its largest scope and by its 5 largest. "
        "Near 100% one caller owns the table: it is the first evicted when the cap is hit, "
        "and the alert for a scope pinned at its quota names it.",
        "percentunit",
        (
            _Target(
                f"sum by (job, instance) (topk by (job, instance) (1, {_m('scope_rows')})) "
                f"/ on (job, instance) sum by (job, instance) ({_m('rows')})",
                "largest scope {{instance}}",
            ),
            _Target(
                f"sum by (job, instance) (topk by (job, instance) (5, {_m('scope_rows')})) "
                f"/ on (job, instance) sum by (job, instance) ({_m('rows')})",
                "5 largest scopes {{instance}}",
            ),
        ),
        max=1,
    ),
    _Panel(
        "timeseries",
        "Top scopes by rows over time",
        "The same top scopes as above, over time: a scope that stays flat at the quota is "
        "hogging it; well-behaved callers come and go.",
        "short",
        (_Target(f"topk(10, max by (scope) ({_m('scope_rows')}))", "{{scope}}"),),
    ),
)

#: file name -> (uid, title, panels)
DASHBOARDS: dict[str, tuple[str, str, tuple[_Panel, ...]]] = {
    "overview.json": ("mcp-cancellation-overview", "MCP cancellation — overview", OVERVIEW),
    "abusive-scopes.json": (
        "mcp-cancellation-abusive-scopes",
        "MCP cancellation — abusive scopes",
        ABUSIVE,
    ),
}


def _variables() -> list[dict[str, Any]]:
    def query_var(name: str, label: str, query: str) -> dict[str, Any]:
        return {
            "name": name,
            "label": label,
            "type": "query",
            "datasource": _DS,
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


def _panel_json(panel: _Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    targets = []
    for index, target in enumerate(panel.targets):
        targets.append(
            {
                "datasource": _DS,
                "editorMode": "code",
                "expr": target.expr,
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
        "datasource": _DS,
        "gridPos": {"h": panel.h, "w": panel.w, "x": x, "y": y},
        "targets": targets,
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": options,
    }


def build_dashboard(uid: str, title: str, panels: Iterable[_Panel]) -> dict[str, Any]:
    """The Grafana JSON model of one dashboard (importable as it is)."""
    laid_out: list[dict[str, Any]] = []
    x = y = row_h = 0
    for panel_id, panel in enumerate(panels, start=1):
        if x + panel.w > 24:
            x, y, row_h = 0, y + row_h, 0
        laid_out.append(_panel_json(panel, panel_id, x, y))
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
        "templating": {"list": _variables()},
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


def build(directory: Path) -> list[Path]:
    """Write every dashboard into *directory*; return the paths written."""
    written = []
    for name, (uid, title, panels) in DASHBOARDS.items():
        path = directory / name
        path.write_text(render(build_dashboard(uid, title, panels)), encoding="utf-8")
        written.append(path)
    return written


# ---------------------------------------------------------------------------------------
# Validation


def known_metric_names() -> frozenset[str]:
    """Every metric name the Prometheus bridge exports, as PromQL names it (counters with
    their ``_total``): :data:`mcp_cancellation.telemetry.prometheus.METRIC_NAMES`."""
    from .telemetry.prometheus import METRIC_NAMES

    return frozenset(METRIC_NAMES)


def metric_names_in(expr: str) -> set[str]:
    """The ``mcp_cancellation_*`` metric names a PromQL expression mentions."""
    return set(_METRIC.findall(expr))


@dataclasses.dataclass(frozen=True)
class PanelQuery:
    """One query of one panel, as Grafana would send it (before variable substitution)."""

    dashboard: str
    panel: str
    ref_id: str
    expr: str
    instant: bool


def panel_queries(document: Mapping[str, Any]) -> Iterator[PanelQuery]:
    """Every query of every panel of *document*, in panel order."""
    for panel in _all_panels(document):
        for target in panel.get("targets", []):
            yield PanelQuery(
                str(document.get("title")),
                str(panel.get("title")),
                str(target.get("refId")),
                str(target.get("expr", "")),
                bool(target.get("instant")),
            )


def substitute(expr: str, rate_interval: str = "15s", **variables: str) -> str:
    """Replace Grafana variables as Grafana would: ``$__rate_interval`` with a window, and
    ``$job``/``$instance`` (all selected) with ``.+`` unless given in *variables*."""
    expr = expr.replace("$__rate_interval", rate_interval)
    for name in ("job", "instance"):
        value = variables.get(name, ".+")
        expr = expr.replace(f"${{{name}}}", value).replace(f"${name}", value)
    return expr


def _all_panels(document: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for panel in document.get("panels", []):
        yield panel
        yield from panel.get("panels", [])  # collapsed rows


def check_dashboard(document: Mapping[str, Any], known: Iterable[str]) -> list[str]:
    """Problems that would stop *document* from working on first import; empty when fine."""
    known = frozenset(known)
    problems: list[str] = []
    text = json.dumps(document)
    if "${DS_" in text or "__inputs" in document:
        problems.append("uses ${DS_...} import inputs; use the datasource variable")
    if not isinstance(document.get("schemaVersion"), int) or document["schemaVersion"] < 39:
        problems.append(f"schemaVersion {document.get('schemaVersion')!r} is older than 39")
    if not document.get("uid") or not document.get("title"):
        problems.append("missing uid or title")
    variables = document.get("templating", {}).get("list", [])
    if not any(
        v.get("name") == "datasource"
        and v.get("type") == "datasource"
        and v.get("query") == "prometheus"
        for v in variables
    ):
        problems.append("no `datasource` template variable of type prometheus")
    for variable in variables:
        if variable.get("type") == "query":
            definition = variable.get("definition", "")
            problems += [
                f"variable {variable.get('name')}: unknown metric {m}"
                for m in sorted(metric_names_in(definition) - known)
            ]
    ids: set[int] = set()
    for panel in _all_panels(document):
        title = panel.get("title", "?")
        if panel.get("type") == "row":
            continue
        if panel.get("id") in ids:
            problems.append(f"{title}: duplicate panel id {panel.get('id')}")
        ids.add(panel.get("id", -1))
        if not panel.get("fieldConfig", {}).get("defaults", {}).get("unit"):
            problems.append(f"{title}: no unit")
        if panel.get("datasource") != _DS:
            problems.append(f"{title}: datasource is not the ${{datasource}} variable")
        targets = panel.get("targets") or []
        if not targets:
            problems.append(f"{title}: no queries")
        for target in targets:
            expr = target.get("expr", "")
            where = f"{title} [{target.get('refId')}]"
            if target.get("datasource") != _DS:
                problems.append(f"{where}: datasource is not the ${{datasource}} variable")
            if not expr:
                problems.append(f"{where}: empty query")
            for window in _RANGE.findall(expr):
                if window != _RATE:
                    problems.append(f"{where}: range [{window}] instead of [{_RATE}]")
            if re.search(r"\b(rate|increase|irate)\s*\(", expr) and _RATE not in expr:
                problems.append(f"{where}: rate without {_RATE}")
            problems += [
                f"{where}: unknown metric {m}" for m in sorted(metric_names_in(expr) - known)
            ]
            if not metric_names_in(expr):
                problems.append(f"{where}: names no mcp_cancellation_ metric")
    return problems


_ANNOTATIONS = ("summary", "description", "runbook_url")


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    anchor = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return anchor.replace(" ", "-")


def check_rules(rules: Mapping[str, Any], known: Iterable[str], runbook: str | None) -> list[str]:
    """Problems in a parsed alert rules file; *runbook* is docs/alerts.md's text, if at hand."""
    known = frozenset(known)
    problems: list[str] = []
    anchors = (
        {github_anchor(line.lstrip("#")) for line in runbook.splitlines() if line.startswith("#")}
        if runbook is not None
        else None
    )
    alerts = 0
    for group in rules.get("groups", []):
        for rule in group.get("rules", []):
            name = rule.get("alert") or rule.get("record") or "?"
            expr = str(rule.get("expr", ""))
            problems += [
                f"{name}: unknown metric {m}" for m in sorted(metric_names_in(expr) - known)
            ]
            if "alert" not in rule:
                continue
            alerts += 1
            annotations = rule.get("annotations") or {}
            for key in _ANNOTATIONS:
                if not annotations.get(key):
                    problems.append(f"{name}: no {key} annotation")
            url = str(annotations.get("runbook_url", ""))
            base, _, anchor = url.partition("#")
            if base != RUNBOOK_BASE or not anchor:
                problems.append(f"{name}: runbook_url must be {RUNBOOK_BASE}#<anchor>")
            elif anchors is not None and anchor not in anchors:
                problems.append(f"{name}: docs/alerts.md has no heading with anchor #{anchor}")
            if "severity" not in (rule.get("labels") or {}):
                problems.append(f"{name}: no severity label")
    if alerts == 0:
        problems.append("no alerting rules")
    return problems


def _check_all(directory: Path, docs: Path | None) -> list[str]:
    import yaml

    known = known_metric_names()
    problems: list[str] = []
    for name, (uid, title, panels) in DASHBOARDS.items():
        path = directory / name
        if not path.exists():
            problems.append(f"{path}: missing")
            continue
        text = path.read_text(encoding="utf-8")
        if text != render(build_dashboard(uid, title, panels)):
            problems.append(f"{path}: stale; run python -m mcp_cancellation._dashboards")
        problems += [f"{path}: {p}" for p in check_dashboard(json.loads(text), known)]
    rules_path = directory / "alerts.yaml"
    runbook_path = docs / "alerts.md" if docs is not None else None
    runbook = (
        runbook_path.read_text(encoding="utf-8") if runbook_path and runbook_path.exists() else None
    )
    rules = yaml.safe_load(rules_path.read_text(encoding="utf-8"))
    problems += [f"{rules_path}: {p}" for p in check_rules(rules, known, runbook)]
    return problems


def main(argv: list[str] | None = None) -> int:
    """``python -m mcp_cancellation._dashboards [--check]``; 1 when something is wrong."""
    parser = argparse.ArgumentParser(prog="python -m mcp_cancellation._dashboards")
    parser.add_argument("--dir", type=Path, default=Path("dashboards"), help="output directory")
    parser.add_argument("--docs", type=Path, default=Path("docs"), help="docs directory")
    parser.add_argument("--check", action="store_true", help="validate, do not write")
    args = parser.parse_args(argv)
    if not args.check:
        for path in build(args.dir):
            print(f"wrote {path}")
    problems = _check_all(args.dir, args.docs if args.docs.exists() else None)
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
