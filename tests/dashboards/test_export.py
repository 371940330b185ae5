"""Exported dashboards and rules: the repository's copy is the export, another selector
keeps every rule valid and its unit tests passing, and the PrometheusRule holds the same
rules."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mcp_cancellation import dashboards
from mcp_cancellation.__main__ import main
from mcp_cancellation.dashboards._rules import rules_text
from mcp_cancellation.dashboards._validation import known_metric_names, metric_names_in

from ..support import project_root
from ._rules import promtool

DASHBOARDS = project_root() / "dashboards"


def test_the_committed_rules_are_the_package_data() -> None:
    assert (DASHBOARDS / "alerts.yaml").read_text(encoding="utf-8") == rules_text()


def test_command_writes_what_the_repository_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "a" / "b"
    assert main(["dashboards", "export", str(target)]) == 0
    assert sorted(p.name for p in target.iterdir()) == [
        "abusive-scopes.json",
        "alerts.yaml",
        "export.json",  # (the options, for the check)
        "overview.json",
    ]
    for path in target.iterdir():
        if path.name != "export.json":
            assert path.read_bytes() == (DASHBOARDS / path.name).read_bytes()
    assert capsys.readouterr().out.count("wrote ") == 4


@pytest.mark.parametrize(
    "options",
    [
        [],
        ["--selector", 'job="mcp"'],
        ["--datasource", "prom-uid"],
        ["--format", "prometheus-rule", "--namespace", "ops"],
        ["--format", "none"],
    ],
    ids=["defaults", "selector", "datasource", "prometheus-rule", "dashboards-only"],
)
def test_the_check_accepts_every_export_and_says_how_to_redo_a_changed_one(
    tmp_path: Path, options: list[str]
) -> None:
    target = tmp_path / "out"
    assert main(["dashboards", "export", str(target), *options]) == 0
    docs = project_root() / "docs"
    check = dashboards_check(["--check", "--dir", str(target), "--docs", str(docs)])
    assert check.returncode == 0, check.stderr
    overview = target / "overview.json"
    overview.write_text(overview.read_text(encoding="utf-8").replace("MCP", "XYZ"))
    check = dashboards_check(["--check", "--dir", str(target), "--docs", str(docs)])
    assert check.returncode == 1
    assert "overview.json: stale; run mcp-cancellation dashboards export" in check.stderr
    assert str(target) in check.stderr  # the directory checked, not ./dashboards
    for option in options:
        assert shlex.quote(option) in check.stderr or option in check.stderr


def dashboards_check(arguments: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mcp_cancellation.dashboards", *arguments],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.prometheus
def test_rules_under_a_selector_stay_valid_and_pass_their_tests(tmp_path: Path) -> None:
    """The unit tests' series all carry job="mcp": with that selector every case must
    still give the same result, and promtool must accept the file."""
    assert main(["dashboards", "export", str(tmp_path), "--selector", 'job="mcp"']) == 0
    rules = yaml.safe_load((tmp_path / "alerts.yaml").read_text(encoding="utf-8"))
    for group in rules["groups"]:
        for rule in group["rules"]:
            for name in metric_names_in(rule["expr"]):
                assert rule["expr"].count(name) == rule["expr"].count(name + '{job="mcp"')
    assert promtool("check", "rules", str(tmp_path / "alerts.yaml")).returncode == 0
    shutil.copyfile(DASHBOARDS / "alerts.test.yaml", tmp_path / "alerts.test.yaml")
    result = promtool("test", "rules", str(tmp_path / "alerts.test.yaml"))
    assert result.returncode == 0, result.stdout + result.stderr
    # ... and a selector that matches none of the test series makes the firing cases fail.
    assert main(["dashboards", "export", str(tmp_path), "--selector", 'job="other"']) == 0
    assert promtool("test", "rules", str(tmp_path / "alerts.test.yaml")).returncode != 0


@pytest.mark.prometheus
def test_prometheus_rule_resource_holds_the_same_rules(tmp_path: Path) -> None:
    args = ["dashboards", "export", str(tmp_path), "--format", "prometheus-rule"]
    assert main([*args, "--namespace", "monitoring", "--rule-name", "mcp"]) == 0
    assert not (tmp_path / "alerts.yaml").exists()
    resource = yaml.safe_load((tmp_path / "alerts.prometheusrule.yaml").read_text())
    assert resource["apiVersion"] == "monitoring.coreos.com/v1"
    assert resource["kind"] == "PrometheusRule"
    assert resource["metadata"]["name"] == "mcp"
    assert resource["metadata"]["namespace"] == "monitoring"
    assert resource["spec"] == yaml.safe_load(rules_text())
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(resource["spec"]), encoding="utf-8")
    assert promtool("check", "rules", str(spec)).returncode == 0


def test_dashboards_only_and_another_datasource(tmp_path: Path) -> None:
    args = ["dashboards", "export", str(tmp_path), "--format", "none", "--datasource", "uid-1"]
    assert main(args) == 0
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["abusive-scopes.json", "export.json", "overview.json"]  # (the CLI's)
    document = json.loads((tmp_path / "overview.json").read_text(encoding="utf-8"))
    assert (
        dashboards.check_dashboard(
            document,
            known_metric_names(),
            dashboards.DashboardConfig(datasource="uid-1"),
        )
        == []
    )


def test_an_unwritable_directory_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert main(["dashboards", "export", str(blocker / "sub")]) == 2
    assert "mcp-cancellation dashboards:" in capsys.readouterr().err
