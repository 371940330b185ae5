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
from mcp_cancellation.dashboards._validation import (
    known_metric_names,
    metric_names_in,
    panel_queries,
    substitute,
)

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


#: Selectors as people write them: braces or none, spaces, a trailing comma, several
#: matchers, every operator, single quotes and raw strings.
ODD_SELECTORS = [
    '{job="mcp"}',
    ' job = "mcp" , ',
    'job=~"mcp|api", env!="dev",',
    "{job!~'test.*'}",
    "job=`mcp`",
    'job="a \\"quoted\\" name"',
]


@pytest.mark.prometheus
@pytest.mark.parametrize("selector", ODD_SELECTORS)
@pytest.mark.parametrize("fmt", ["rules", "prometheus-rule"])
def test_an_export_with_a_selector_as_people_write_it_passes_promtool_and_the_check(
    tmp_path: Path, selector: str, fmt: str
) -> None:
    assert (
        main(["dashboards", "export", str(tmp_path), "--selector", selector, "--format", fmt]) == 0
    )
    docs = project_root() / "docs"
    check = dashboards_check(["--check", "--dir", str(tmp_path), "--docs", str(docs)])
    assert check.returncode == 0, check.stderr
    if fmt == "rules":
        rules_path = tmp_path / "alerts.yaml"
    else:  # (promtool reads the groups of the resource's spec)
        spec = yaml.safe_load((tmp_path / "alerts.prometheusrule.yaml").read_text())["spec"]
        rules_path = tmp_path / "spec.yaml"
        rules_path.write_text(yaml.safe_dump(spec))
    result = promtool("check", "rules", str(rules_path))
    assert result.returncode == 0, result.stdout + result.stderr
    # Every panel query of both dashboards, as a recording rule (Grafana's variables
    # substituted), parses too: no {{...}} or bare value reached a query.
    rules = [
        {"record": f"panel:{path.stem.replace('-', '_')}:{index}", "expr": substitute(q.expr)}
        for path in sorted(tmp_path.glob("*.json"))
        if path.name != "export.json"
        for index, q in enumerate(panel_queries(json.loads(path.read_text())))
    ]
    panels = tmp_path / "panels.yaml"
    panels.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}))
    result = promtool("check", "rules", str(panels))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("selector", "hint"),
    [
        ("job=mcp", 'write job="mcp"'),
        ('{{job="mcp"}}', "a label name was expected"),
        ('job="mcp" env="dev"', "',' was expected"),
        ("job", "'=', '!=', '=~' or '!~' was expected"),
        ('job=~"(unclosed"', "regular expression"),
    ],
)
def test_a_selector_that_is_not_label_matchers_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], selector: str, hint: str
) -> None:
    assert main(["dashboards", "export", str(tmp_path / "out"), "--selector", selector]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "invalid selector" in err, err
    assert hint in err, err
    assert not (tmp_path / "out").exists()  # nothing written


def test_the_check_refuses_an_export_json_whose_selector_is_not_label_matchers(
    tmp_path: Path,
) -> None:
    assert main(["dashboards", "export", str(tmp_path)]) == 0
    manifest = tmp_path / "export.json"
    options = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**options, "rules_selector": "job=mcp"}))
    check = dashboards_check(["--check", "--dir", str(tmp_path)])
    assert check.returncode == 1
    assert "export.json: invalid selector 'job=mcp'" in check.stderr
