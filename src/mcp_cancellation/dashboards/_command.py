"""``mcp-cancellation dashboards export DIR``: the Grafana dashboards and the Prometheus
alert rules from the installed package, for the selector and datasource you use.

Needs no extra and no pyyaml: everything is package data or generated from it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ._config import DashboardConfig
from ._export import RULE_FORMATS, export
from ._selector import label_matchers

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> None:
    """Register ``dashboards`` on the ``mcp-cancellation`` command."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "dashboards",
        help="write the Grafana dashboards and Prometheus alert rules into a directory",
        description="Grafana dashboards and Prometheus alert rules, from the installed package.",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    out = actions.add_parser(
        "export",
        help="write overview.json, abusive-scopes.json and the alert rules into DIR",
        description="Write both Grafana dashboards (JSON) and the alert rules (YAML) into "
        "DIR, created if missing. Import the JSON files into Grafana (or provision the "
        "directory) and load the rules with rule_files: (or apply the PrometheusRule).",
    )
    out.add_argument("dir", type=Path, metavar="DIR", help="output directory")
    out.add_argument(
        "--selector",
        default=None,
        metavar="MATCHERS",
        help="PromQL label matchers added to every query, e.g. 'job=\"mcp\"' or "
        "'{job=\"mcp\"}' (dashboards default: their job and instance variables; rules "
        "default: none)",
    )
    out.add_argument(
        "--datasource",
        default=DashboardConfig().datasource,
        metavar="UID",
        help="Prometheus datasource uid of every panel (default: a ${datasource} variable "
        "picked on import)",
    )
    out.add_argument(
        "--format",
        choices=[*RULE_FORMATS, "none"],
        default="rules",
        help="the alert rules as a rule_files file (alerts.yaml, default), a "
        "prometheus-operator PrometheusRule (alerts.prometheusrule.yaml), or none",
    )
    out.add_argument(
        "--rule-name", default="mcp-cancellation", help="metadata.name of the PrometheusRule"
    )
    out.add_argument("--namespace", default=None, help="metadata.namespace of the PrometheusRule")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Export; 0 on success, 2 when an option is invalid (a selector that is not PromQL
    label matchers: one line) or the directory cannot be written."""
    defaults = DashboardConfig()
    try:
        config = DashboardConfig(
            selector=defaults.selector if args.selector is None else args.selector,
            datasource=args.datasource,
        )
        rules_selector = label_matchers(args.selector or "")
    except ValueError as exc:
        print(f"mcp-cancellation dashboards: {exc}", file=sys.stderr)
        return 2
    try:
        written = export(
            args.dir,
            config,
            rules=None if args.format == "none" else args.format,
            rules_selector=rules_selector,
            rule_name=args.rule_name,
            namespace=args.namespace,
            manifest=True,
        )
    except OSError as exc:
        print(f"mcp-cancellation dashboards: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    return 0
