"""Alert rules: what every rule of ``alerts.yaml`` must carry to be actionable."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from .config import RUNBOOK_BASE
from .validation import metric_names_in

__all__ = ["check_rules", "github_anchor"]

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
