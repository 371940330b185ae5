"""The dashboards import as they are and name only metrics the package exports."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from mcp_cancellation import dashboards
from mcp_cancellation.dashboards._config import RUNBOOK_BASE
from mcp_cancellation.dashboards._generation import DASHBOARDS as GENERATED
from mcp_cancellation.dashboards._generation import build_dashboard
from mcp_cancellation.dashboards._validation import (
    known_metric_names,
    metric_names_in,
    panel_queries,
    substitute,
)
from mcp_cancellation.telemetry.prometheus import METRIC_NAMES

from ..support import project_root
from ._rules import load_rules

ROOT = project_root()
DASHBOARDS = ROOT / "dashboards"
NAMES = sorted(GENERATED)


def load(name: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((DASHBOARDS / name).read_text(encoding="utf-8"))
    return document


def test_known_metrics_are_the_exporters_list() -> None:
    standard = {f"mcp_server_operation_duration_seconds_{s}" for s in ("bucket", "sum", "count")}
    assert known_metric_names() == METRIC_NAMES | standard


@pytest.mark.parametrize("name", NAMES)
def test_committed_dashboard_is_the_generated_one(name: str) -> None:
    uid, title, panels = GENERATED[name]
    expected = dashboards.render(build_dashboard(uid, title, panels))
    assert (DASHBOARDS / name).read_text(encoding="utf-8") == expected, (
        "stale: run .venv/bin/python -m mcp_cancellation._dashboards"
    )


@pytest.mark.parametrize("name", NAMES)
def test_dashboard_is_valid(name: str) -> None:
    assert dashboards.check_dashboard(load(name), known_metric_names()) == []


@pytest.mark.parametrize("name", NAMES)
def test_dashboard_import_essentials(name: str) -> None:
    """What Grafana's import needs, spelled out (the validator checks the same)."""
    document = load(name)
    assert document["schemaVersion"] >= 39
    assert document["id"] is None
    assert document["uid"].startswith("mcp-cancellation-")
    assert "__inputs" not in document
    assert "${DS_" not in json.dumps(document)
    variables = {v["name"]: v for v in document["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for panel in document["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["fieldConfig"]["defaults"]["unit"]
        for target in panel["targets"]:
            if "rate(" in target["expr"]:
                assert "[$__rate_interval]" in target["expr"]


def test_panels_cover_the_issue() -> None:
    """Every panel the issue asks for exists, and every exported metric is shown."""
    titles = {name: {p["title"] for p in load(name)["panels"]} for name in NAMES}
    assert {
        "Tables",
        "Storage up, per instance",
        "Storage errors per second by operation",
        "Cancellations per second by scope kind",
        "Table fill against max_rows",
        "In-flight requests by scope kind",
        "Evictions per second by scope kind",
        "Rejections per second",
        "Cleanup removals per second",
        "Cancel-to-stop latency",
        "Cancel-to-stop by outcome",
        "Tools that ignore cancellation",
        "Ignored cancellations per minute by tool",
        "Tool calls per second by tool",
        "Share of tool calls cancelled",
        "Duration of cancelled and completed calls (p95)",
        "Tasks created and ended per second",
        "Tasks running by tool",
        "Task duration by tool",
        "Calls refused as tasks",
        "Share of tasks failing",
    } <= titles["overview.json"]
    assert {
        "Top scopes by rows",
        "Scopes at or near their quota",
        "Top rejected scopes",
        "Rejection rate by scope kind",
        "Share of the table held by the largest scopes",
        "Task rejections by scope kind",
    } <= titles["abusive-scopes.json"]
    used: set[str] = set()
    for name in NAMES:
        for query in panel_queries(load(name)):
            used |= metric_names_in(query.expr)
    assert used == known_metric_names() - {
        "mcp_server_operation_duration_seconds_sum"  # (the panels read counts and buckets)
    }


def test_alert_rules_are_valid() -> None:
    rules = load_rules()
    runbook = (ROOT / "docs" / "alerts.md").read_text(encoding="utf-8")
    assert dashboards.check_rules(rules, METRIC_NAMES, runbook) == []
    names = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    assert names == {
        "MCPCancellationQuotaRejectionSpike",
        "MCPCancellationTableNearCap",
        "MCPCancellationEvictionsSustained",
        "MCPCancellationScopePinnedAtQuota",
        "MCPCancellationStorageDown",
        "MCPCancellationToolIgnoresCancellation",
        "MCPCancellationTasksFailing",
        "MCPCancellationTaskQuotaReached",
    }


@pytest.mark.parametrize("name", NAMES)
def test_rows_no_value_links_and_variables(name: str) -> None:
    """Collapsible rows, "nothing happened" text, links that carry time and variables."""
    document = load(name)
    rows = [p for p in document["panels"] if p["type"] == "row"]
    assert len(rows) >= 2
    assert document["panels"][0]["type"] == "row"  # every panel sits in a row
    assert all(r["gridPos"]["w"] == 24 and "collapsed" in r for r in rows)
    panels = [p for p in document["panels"] if p["type"] != "row"]
    with_no_value = [p for p in panels if "noValue" in p["fieldConfig"]["defaults"]]
    assert len(with_no_value) >= len(panels) // 2
    variables = {v["name"] for v in document["templating"]["list"]}
    assert {"datasource", "job", "instance", "storage"} <= variables
    (link,) = document["links"]
    other = next(uid for uid, _, _ in GENERATED.values() if uid != document["uid"])
    assert link["url"] == f"/d/{other}"
    assert link["keepTime"] is True
    assert link["includeVars"] is True
    panel_links = [link for p in panels for link in p.get("links", [])]
    assert panel_links
    for panel_link in panel_links:
        assert panel_link["url"] == f"/d/{other}?${{__url_time_range}}&${{__all_variables}}"


def test_overview_has_one_line_per_table() -> None:
    (panel,) = [p for p in load("overview.json")["panels"] if p["title"] == "Tables"]
    assert panel["type"] == "table"
    assert all(t["instant"] and t["format"] == "table" for t in panel["targets"])
    assert all("by (storage)" in t["expr"] for t in panel["targets"])
    names = panel["transformations"][-1]["options"]["renameByName"]
    assert names["storage"] == "Table"
    assert len(names) == len(panel["targets"]) + 1


TABLE_STATE = {
    "mcp_cancellation_" + n for n in ("rows", "in_flight", "max_rows", "max_rows_per_scope")
} | {"mcp_cancellation_scope_rows"}


@pytest.mark.parametrize("name", NAMES)
def test_table_state_queries_read_each_table_once(name: str) -> None:
    """Every query of a table-state gauge aggregates with max or min by storage (or by a
    scope, which one table holds once), or is a plain min/max, before anything sums across
    processes. The end-to-end test checks the values."""
    for query in panel_queries(load(name)):
        names = metric_names_in(query.expr)
        if names & TABLE_STATE:
            assert 'storage=~"$storage"' in query.expr, query
            idempotent = query.expr.startswith(("min(", "max("))  # a limit, read as one
            assert idempotent or any(
                f"{agg} by ({key}" in query.expr
                for agg in ("max", "min")
                for key in ("storage", "scope")
            ), query


def test_command_line_check_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert dashboards.main(["--check", "--dir", str(DASHBOARDS), "--docs", str(ROOT / "docs")]) == 0
    assert capsys.readouterr().err == ""


def test_command_line_builds_into_a_directory(tmp_path: Path) -> None:
    (tmp_path / "alerts.yaml").write_bytes((DASHBOARDS / "alerts.yaml").read_bytes())
    assert dashboards.main(["--dir", str(tmp_path), "--docs", str(ROOT / "docs")]) == 0
    for name in NAMES:
        assert (tmp_path / name).read_bytes() == (DASHBOARDS / name).read_bytes()


# -- the validator catches what breaks an import -------------------------------------------


def _broken(change: str) -> dict[str, Any]:
    document = copy.deepcopy(load("overview.json"))
    panel = next(p for p in document["panels"] if "rate(" in json.dumps(p.get("targets", [])))
    target = panel["targets"][0]
    if change == "ds_input":
        panel["datasource"] = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
    elif change == "no_unit":
        del panel["fieldConfig"]["defaults"]["unit"]
    elif change == "fixed_window":
        target["expr"] = target["expr"].replace("$__rate_interval", "5m")
    elif change == "unknown_metric":
        target["expr"] = "sum(rate(mcp_cancellation_cancellations_total[$__rate_interval]))"
    elif change == "old_schema":
        document["schemaVersion"] = 27
    elif change == "no_datasource_variable":
        document["templating"]["list"] = document["templating"]["list"][1:]
    return document


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("ds_input", "${DS_"),
        ("no_unit", "no unit"),
        ("fixed_window", "range [5m]"),
        ("unknown_metric", "unknown metric mcp_cancellation_cancellations_total"),
        ("old_schema", "schemaVersion 27"),
        ("no_datasource_variable", "no `datasource` template variable"),
    ],
)
def test_validator_reports(change: str, message: str) -> None:
    problems = dashboards.check_dashboard(_broken(change), METRIC_NAMES)
    assert any(message in problem for problem in problems), problems


def test_rule_validator_reports_missing_runbook_and_unknown_metric() -> None:
    rules = {
        "groups": [
            {
                "name": "g",
                "rules": [
                    {
                        "alert": "A",
                        "expr": "mcp_cancellation_nope > 0",
                        "labels": {"severity": "warning"},
                        "annotations": {
                            "summary": "s",
                            "description": "d",
                            "runbook_url": f"{RUNBOOK_BASE}#missing-anchor",
                        },
                    },
                    {"alert": "B", "expr": "mcp_cancellation_rows > 0"},
                ],
            }
        ]
    }
    problems = dashboards.check_rules(rules, METRIC_NAMES, "# Alerts\n## Other\n")
    assert "A: unknown metric mcp_cancellation_nope" in problems
    assert "A: docs/alerts.md has no heading with anchor #missing-anchor" in problems
    assert "B: no summary annotation" in problems
    assert "B: no severity label" in problems


def test_rules_follow_the_monitoring_mixin_conventions() -> None:
    def rule(name: str, severity: str, summary: str, description: str) -> dict[str, Any]:
        return {
            "alert": name,
            "expr": "mcp_cancellation_rows > 0",
            "labels": {"severity": severity},
            "annotations": {
                "summary": summary,
                "description": description,
                "runbook_url": f"{RUNBOOK_BASE}#other",
            },
        }

    rules = {
        "groups": [
            {
                "name": "g",
                "rules": [
                    rule("GoodAlert", "warning", "Plain.", "Job {{ $labels.job }}."),
                    rule("not_camel", "warning", "Plain.", "Job {{ $labels.job }}."),
                    rule("A" + "b" * 40, "warning", "Plain.", "Job {{ $labels.job }}."),
                    rule("Loud", "page", "Plain.", "Job {{ $labels.job }}."),
                    rule("Templated", "info", "Job {{ $labels.job }}", "Job {{ $labels.job }}."),
                    rule("Vague", "critical", "Plain.", "Something happened."),
                ],
            },
            {
                "name": "big",
                "rules": [rule(f"Alert{n}", "info", "P.", "{{ $value }}") for n in range(21)],
            },
        ]
    }
    problems = dashboards.check_rules(rules, METRIC_NAMES, "# Alerts\n## Other\n")
    assert not [p for p in problems if p.startswith("GoodAlert:")]
    assert "not_camel: the name must be CamelCase, 40 at most" in problems
    assert f"A{'b' * 40}: the name must be CamelCase, 40 at most" in problems
    assert "Loud: severity must be one of info, warning, critical" in problems
    assert "Templated: the summary must be a plain sentence (no template)" in problems
    assert "Vague: the description must say which series (a template)" in problems
    assert "group big: over 20 rules" in problems


def test_substitute_replaces_grafana_variables() -> None:
    expr = (
        'rate(mcp_cancellation_cancelled_total{job=~"$job", instance=~"${instance}"}'
        "[$__rate_interval])"
    )
    assert substitute(expr, "10s", job="demo") == (
        'rate(mcp_cancellation_cancelled_total{job=~"demo", instance=~".+"}[10s])'
    )


@pytest.mark.parametrize("selector", ['job="mcp"', ""])
def test_export_with_another_selector_and_datasource(tmp_path: Path, selector: str) -> None:
    config = dashboards.DashboardConfig(selector=selector, datasource="prometheus-main")
    target = tmp_path / "not" / "there" / "yet"
    written = dashboards.export(target, config, rules=None)
    assert sorted(p.name for p in written) == NAMES
    for path in written:
        document = json.loads(path.read_text(encoding="utf-8"))
        assert dashboards.check_dashboard(document, known_metric_names(), config) == []
        exprs = [q.expr for q in panel_queries(document)]
        assert exprs
        assert all("__MCP_CANCELLATION_SELECTOR__" not in e for e in exprs)
        assert all("$job" not in e and "$instance" not in e for e in exprs)
        if selector:
            assert all(selector in e for e in exprs)
        assert '"uid": "prometheus-main"' in path.read_text(encoding="utf-8")
        # No job or instance variable that no query would use.
        names = [v["name"] for v in document["templating"]["list"]]
        assert names == ["datasource", "storage"]


def test_a_variable_no_query_uses_is_a_problem() -> None:
    document = json.loads(next(iter(dashboards.dashboards(dashboards.DashboardConfig()).values())))
    document["templating"]["list"].append(
        {"name": "region", "type": "query", "definition": "label_values(up, region)"}
    )
    problems = dashboards.check_dashboard(document, known_metric_names())
    assert "variable region: no query uses it" in problems
