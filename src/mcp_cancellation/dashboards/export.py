"""Export: write the dashboards into a directory, and check a directory against the
source (``python -m mcp_cancellation.dashboards [--check]``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .config import DEFAULT, DashboardConfig
from .generation import dashboards
from .rules import check_rules
from .validation import check_dashboard, known_metric_names

__all__ = ["check_directory", "export", "main"]


def export(directory: Path | str, config: DashboardConfig = DEFAULT) -> list[Path]:
    """Write every dashboard into *directory* (created if missing); the paths written."""
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in dashboards(config).items():
        path = target / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def check_directory(directory: Path, docs: Path | None) -> list[str]:
    """Problems of the dashboards and ``alerts.yaml`` in *directory* (stale files too);
    *docs* holds ``alerts.md``, whose headings the runbook links must name."""
    import yaml

    known = known_metric_names()
    problems: list[str] = []
    for name, expected in dashboards().items():
        path = directory / name
        if not path.exists():
            problems.append(f"{path}: missing")
            continue
        text = path.read_text(encoding="utf-8")
        if text != expected:
            problems.append(f"{path}: stale; run python -m mcp_cancellation.dashboards")
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
    """``python -m mcp_cancellation.dashboards [--check]``; 1 when something is wrong."""
    parser = argparse.ArgumentParser(prog="python -m mcp_cancellation.dashboards")
    parser.add_argument("--dir", type=Path, default=Path("dashboards"), help="output directory")
    parser.add_argument("--docs", type=Path, default=Path("docs"), help="docs directory")
    parser.add_argument("--check", action="store_true", help="validate, do not write")
    args = parser.parse_args(argv)
    if not args.check:
        for path in export(args.dir):
            print(f"wrote {path}")
    problems = check_directory(args.dir, args.docs if args.docs.exists() else None)
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0
