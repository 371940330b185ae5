"""Export: write the dashboards and the alert rules into a directory (what
``mcp-cancellation dashboards export`` does), and check a directory against the source
(``python -m mcp_cancellation.dashboards [--check]``, for this repository's copy)."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from .._extras import requires
from ._config import DEFAULT, DashboardConfig
from ._generation import dashboards
from ._rules import RULES_FILE, check_rules, prometheus_rule, rules_text
from ._selector import label_matchers
from ._validation import check_dashboard, known_metric_names

__all__ = ["PROMETHEUS_RULE_FILE", "RULE_FORMATS", "check_directory", "export", "main"]

#: How the alert rules can be written: a Prometheus ``rule_files`` file, or a
#: prometheus-operator ``PrometheusRule`` resource.
RULE_FORMATS = ("rules", "prometheus-rule")
PROMETHEUS_RULE_FILE = "alerts.prometheusrule.yaml"
#: What an export was made with, written beside it: the check regenerates from it.
MANIFEST = "export.json"


def export(
    directory: Path | str,
    config: DashboardConfig = DEFAULT,
    *,
    rules: str | None = "rules",
    rules_selector: str = "",
    rule_name: str = "mcp-cancellation",
    namespace: str | None = None,
    manifest: bool = False,
) -> list[Path]:
    """Write every dashboard and the alert rules into *directory* (created if missing);
    the paths written.

    *rules* is one of :data:`RULE_FORMATS` (``alerts.yaml``, or
    ``alerts.prometheusrule.yaml`` named *rule_name* in *namespace*), or ``None`` for the
    dashboards only. *rules_selector* is added to every metric the rules query. With
    *manifest*, ``export.json`` records the options, so that ``python -m
    mcp_cancellation.dashboards --check --dir DIR`` checks the files against them.
    """
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    files = dict(dashboards(config))
    if rules == "rules":
        files[RULES_FILE] = rules_text(rules_selector)
    elif rules == "prometheus-rule":
        files[PROMETHEUS_RULE_FILE] = prometheus_rule(rules_selector, rule_name, namespace)
    elif rules is not None:
        raise ValueError(f"rules must be one of {RULE_FORMATS} or None, not {rules!r}")
    if manifest:  # (what --check regenerates the files from)
        options = {
            "selector": config.selector,
            "datasource": config.datasource,
            "rules": rules,
            "rules_selector": rules_selector,
            "rule_name": rule_name,
            "namespace": namespace,
        }
        files[MANIFEST] = json.dumps(options, indent=1)
    written = []
    for name, text in files.items():
        path = target / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def check_directory(directory: Path, docs: Path | None) -> list[str]:
    """Problems of the dashboards and alert rules in *directory* (stale files too):
    checked against what the options of its export (``export.json``, written by
    ``mcp-cancellation dashboards export``) generate, or the defaults (this
    repository's copy); *docs* holds ``alerts.md``, whose headings the runbook links
    must name."""
    with requires("dashboards", "python -m mcp_cancellation.dashboards --check"):
        import yaml

    manifest_path = directory / MANIFEST
    options = (
        json.loads(manifest_path.read_text(encoding="utf-8")) if manifest_path.exists() else {}
    )
    try:
        config = DashboardConfig(
            selector=options.get("selector", DEFAULT.selector),
            datasource=options.get("datasource", DEFAULT.datasource),
        )
        label_matchers(options.get("rules_selector", ""))
    except ValueError as exc:  # (an export.json written by hand, or by an older version)
        return [f"{manifest_path}: {exc}"]
    regenerate = _regenerate_command(directory, options)
    known = known_metric_names()
    problems: list[str] = []
    for name, expected in dashboards(config).items():
        path = directory / name
        if not path.exists():
            problems.append(f"{path}: missing")
            continue
        text = path.read_text(encoding="utf-8")
        if text != expected:
            problems.append(f"{path}: stale; run {regenerate}")
        problems += [f"{path}: {p}" for p in check_dashboard(json.loads(text), known, config)]
    fmt = options.get("rules", "rules")
    if fmt is None:
        return problems
    selector = options.get("rules_selector", "")
    if fmt == "prometheus-rule":
        rules_path = directory / PROMETHEUS_RULE_FILE
        name, namespace = options.get("rule_name", "mcp-cancellation"), options.get("namespace")
        expected_rules = prometheus_rule(selector, name, namespace)
    else:
        rules_path = directory / RULES_FILE
        expected_rules = rules_text(selector)
    runbook_path = docs / "alerts.md" if docs is not None else None
    runbook = (
        runbook_path.read_text(encoding="utf-8") if runbook_path and runbook_path.exists() else None
    )
    if not rules_path.exists():
        return [*problems, f"{rules_path}: missing"]
    text = rules_path.read_text(encoding="utf-8")
    if text != expected_rules:
        problems.append(f"{rules_path}: stale; run {regenerate}")
    document = yaml.safe_load(text)
    if fmt == "prometheus-rule":  # (a PrometheusRule holds the groups in its spec)
        document = (document or {}).get("spec", {})
    problems += [f"{rules_path}: {p}" for p in check_rules(document, known, runbook)]
    return problems


def _regenerate_command(directory: Path, options: dict[str, object]) -> str:
    """The command that writes *directory* again, as it was made."""
    if not options:
        return f"python -m mcp_cancellation.dashboards --dir {shlex.quote(str(directory))}"
    words = ["mcp-cancellation", "dashboards", "export", str(directory)]
    defaults = DashboardConfig()
    if options.get("selector") != defaults.selector:
        words += ["--selector", str(options.get("rules_selector") or options.get("selector"))]
    if options.get("datasource") != defaults.datasource:
        words += ["--datasource", str(options["datasource"])]
    fmt = options.get("rules", "rules")
    words += ["--format", "none" if fmt is None else str(fmt)]
    if fmt == "prometheus-rule":
        words += ["--rule-name", str(options.get("rule_name"))]
        if options.get("namespace"):
            words += ["--namespace", str(options["namespace"])]
    return " ".join(shlex.quote(w) for w in words)


def main(argv: list[str] | None = None) -> int:
    """``python -m mcp_cancellation.dashboards [--check]``: rewrite (or check) this
    repository's copy of the dashboards and rules (or *--dir*, a directory that
    ``mcp-cancellation dashboards export`` wrote); 1 when something is wrong, 2 when the
    ``dashboards`` extra (pyyaml) is missing."""
    parser = argparse.ArgumentParser(prog="python -m mcp_cancellation.dashboards")
    parser.add_argument("--dir", type=Path, default=Path("dashboards"), help="output directory")
    parser.add_argument("--docs", type=Path, default=Path("docs"), help="docs directory")
    parser.add_argument("--check", action="store_true", help="validate, do not write")
    args = parser.parse_args(argv)
    if not args.check:
        for path in export(args.dir):
            print(f"wrote {path}")
    try:
        problems = check_directory(args.dir, args.docs if args.docs.exists() else None)
    except ImportError as exc:
        parser.error(str(exc))
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0
