"""Validation: what would stop a dashboard from working on first import."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ._config import DEFAULT, DashboardConfig

__all__ = [
    "METRIC_NAME",
    "PanelQuery",
    "check_dashboard",
    "known_metric_names",
    "metric_names_in",
    "panel_queries",
    "substitute",
]

_RATE = "$__rate_interval"
#: A metric name of this package inside a PromQL expression.
METRIC_NAME = r"\bmcp_cancellation_[a-zA-Z0-9_]*[a-zA-Z0-9]"
_METRIC = re.compile(METRIC_NAME)
#: The standard MCP server metric the bridges also export (outside the package's prefix).
_STANDARD = re.compile(r"\bmcp_server_operation_duration_seconds_(?:bucket|sum|count)\b")
_RANGE = re.compile(r"\[([^\]]*)\]")


def known_metric_names() -> frozenset[str]:
    """Every metric name the Prometheus bridge exports, as PromQL names it (counters with
    their ``_total``): :data:`mcp_cancellation.telemetry.prometheus.METRIC_NAMES`."""
    from ..telemetry import METRIC_NAMES

    standard = "mcp_server_operation_duration_seconds_"
    return frozenset(METRIC_NAMES) | {standard + s for s in ("bucket", "sum", "count")}


def metric_names_in(expr: str) -> set[str]:
    """The ``mcp_cancellation_*`` metric names a PromQL expression mentions."""
    return set(_METRIC.findall(expr)) | set(_STANDARD.findall(expr))


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
    ``$job``/``$instance``/``$storage`` (all selected) with ``.+`` unless given in
    *variables*."""
    expr = expr.replace("$__rate_interval", rate_interval)
    for name in ("job", "instance", "storage"):
        value = variables.get(name, ".+")
        expr = expr.replace(f"${{{name}}}", value).replace(f"${name}", value)
    return expr


def _all_panels(document: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for panel in document.get("panels", []):
        yield panel
        yield from panel.get("panels", [])  # collapsed rows


def check_dashboard(
    document: Mapping[str, Any], known: Iterable[str], config: DashboardConfig = DEFAULT
) -> list[str]:
    """Problems that would stop *document* from working on first import; empty when fine."""
    known = frozenset(known)
    datasource = config.datasource_ref
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
    # A variable no query uses (a panel's, or another variable's) is a control that does
    # nothing (the mixins' lint): say so.
    used = " ".join(
        [str(t.get("expr", "")) for p in _all_panels(document) for t in p.get("targets") or []]
        + [str(v.get("definition", "")) for v in variables]
    )
    for variable in variables:
        name = variable.get("name")
        if name != "datasource" and not re.search(rf"\$(?:{name}\b|\{{{name}[}}:])", used):
            problems.append(f"variable {name}: no query uses it")
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
        if panel.get("datasource") != datasource:
            problems.append(f"{title}: datasource is not {config.datasource}")
        targets = panel.get("targets") or []
        if not targets:
            problems.append(f"{title}: no queries")
        for target in targets:
            expr = target.get("expr", "")
            where = f"{title} [{target.get('refId')}]"
            if target.get("datasource") != datasource:
                problems.append(f"{where}: datasource is not {config.datasource}")
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
                problems.append(f"{where}: names no metric of the bridges")
    return problems
