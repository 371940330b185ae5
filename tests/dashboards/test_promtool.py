"""``promtool`` accepts the alert rules, their unit tests pass, and every panel query parses."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mcp_cancellation.dashboards._generation import DASHBOARDS as GENERATED
from mcp_cancellation.dashboards._validation import panel_queries, substitute

from ..support import project_root
from ._rules import load_dashboard, load_rules, promtool, rules_with_short_for

pytestmark = pytest.mark.prometheus

DASHBOARDS = project_root() / "dashboards"


def test_check_rules() -> None:
    result = promtool("check", "rules", str(DASHBOARDS / "alerts.yaml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 8 rules found" in result.stdout


def test_rule_unit_tests() -> None:
    """Every alert firing and not firing, on synthetic series (alerts.test.yaml)."""
    result = promtool("test", "rules", str(DASHBOARDS / "alerts.test.yaml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_rule_unit_tests_cover_every_alert() -> None:
    tests = yaml.safe_load((DASHBOARDS / "alerts.test.yaml").read_text(encoding="utf-8"))
    rules = load_rules()
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    fired: set[str] = set()
    silent: set[str] = set()
    for case in tests["tests"]:
        for check in case["alert_rule_test"]:
            (fired if check.get("exp_alerts") else silent).add(check["alertname"])
    assert fired == alerts
    assert silent == alerts


def test_a_wrong_expectation_fails(tmp_path: Path) -> None:
    """The unit tests can fail: expecting a firing alert where none fires is caught."""
    (tmp_path / "alerts.yaml").write_bytes((DASHBOARDS / "alerts.yaml").read_bytes())
    tests = yaml.safe_load((DASHBOARDS / "alerts.test.yaml").read_text(encoding="utf-8"))
    (case,) = [c for c in tests["tests"] if c["name"].startswith("spike, trickle: a steady 0.18")]
    assert case["alert_rule_test"][1]["exp_alerts"] == []  # a trickle, which must not fire
    case["alert_rule_test"][1]["exp_alerts"] = [{"exp_labels": {"severity": "warning"}}]
    tests["tests"] = [case]
    (tmp_path / "alerts.test.yaml").write_text(yaml.safe_dump(tests), encoding="utf-8")
    result = promtool("test", "rules", str(tmp_path / "alerts.test.yaml"))
    assert result.returncode != 0


def test_every_panel_query_parses(tmp_path: Path) -> None:
    """Each panel query, its Grafana variables substituted, as a recording rule."""
    rules = []
    for name in sorted(GENERATED):
        for index, query in enumerate(panel_queries(load_dashboard(name))):
            rules.append(
                {
                    "record": f"panel:{name.split('.')[0].replace('-', '_')}:{index}",
                    "expr": substitute(query.expr),
                }
            )
    path = tmp_path / "panels.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}))
    result = promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout


def test_end_to_end_rules_differ_only_in_for(tmp_path: Path) -> None:
    """The e2e test loads the production rules with ``for:`` shortened, nothing else."""
    path = rules_with_short_for(tmp_path)
    assert promtool("check", "rules", str(path)).returncode == 0
    short = yaml.safe_load(path.read_text())
    real = load_rules()
    for fast, slow in zip(short["groups"][0]["rules"], real["groups"][0]["rules"], strict=True):
        assert fast.get("for") == ("1s" if "for" in slow else None)
        assert {k: v for k, v in fast.items() if k != "for"} == {
            k: v for k, v in slow.items() if k != "for"
        }
