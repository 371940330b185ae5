"""Alert rules: the shipped ``alerts.yaml`` (package data), the same rules under another
label selector or as a prometheus-operator ``PrometheusRule``, and what every rule must
carry to be actionable.

The rules are written by hand, for people to read; they are handled as text here, so that
exporting them needs neither pyyaml nor any extra.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from importlib import resources
from typing import Any

from ._config import RUNBOOK_BASE
from ._selector import label_matchers
from ._validation import METRIC_NAME, metric_names_in

__all__ = [
    "RULES_FILE",
    "check_rules",
    "github_anchor",
    "prometheus_rule",
    "rules_text",
    "with_selector",
]

#: The name of the rules file, in the package and in an exported directory.
RULES_FILE = "alerts.yaml"

#: A metric name, and the brace of its selector if it has one.
_METRIC = re.compile(rf"({METRIC_NAME})(\{{)?")
_EXPR = re.compile(r"^(\s*)expr: [|>]-?\s*$")


def rules_text(selector: str = "") -> str:
    """The shipped alert rules, with *selector* (label matchers such as ``job="mcp"``,
    braces optional; ``ValueError`` if it is not one) added to every metric they
    query."""
    text = resources.files(__package__).joinpath(RULES_FILE).read_text(encoding="utf-8")
    selector = label_matchers(selector)
    return with_selector(text, selector) if selector else text


def with_selector(text: str, selector: str) -> str:
    """*text* (a rules file) with *selector* added to every metric of every ``expr``."""

    def add(match: re.Match[str]) -> str:
        name, brace = match.group(1), match.group(2)
        return f"{name}{{{selector}, " if brace else f"{name}{{{selector}}}"

    out: list[str] = []
    indent: int | None = None  # the indentation of the expr: key being read, if any
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        depth = len(line) - len(line.lstrip())
        if indent is not None and stripped and depth <= indent:
            indent = None
        if indent is not None and stripped and not stripped.startswith("#"):
            line = _METRIC.sub(add, line)
        found = _EXPR.match(line)
        if found is not None:
            indent = len(found.group(1))
        out.append(line)
    return "".join(out)


def prometheus_rule(
    selector: str = "", name: str = "mcp-cancellation", namespace: str | None = None
) -> str:
    """The rules as a prometheus-operator ``PrometheusRule`` resource (YAML text)."""
    body = rules_text(selector)
    start = body.index("groups:")
    spec = "".join(f"  {line}" if line.strip() else line for line in body[start:].splitlines(True))
    metadata = f"  name: {name}\n"
    if namespace:
        metadata += f"  namespace: {namespace}\n"
    return (
        "# mcp-cancellation alert rules as a prometheus-operator resource; the runbooks are in\n"
        f"# {RUNBOOK_BASE}\n"
        "apiVersion: monitoring.coreos.com/v1\n"
        "kind: PrometheusRule\n"
        "metadata:\n"
        f"{metadata}"
        "  labels:\n"
        "    app.kubernetes.io/name: mcp-cancellation\n"
        "spec:\n"
        f"{spec}"
    )


_ANNOTATIONS = ("summary", "description", "runbook_url")
#: The monitoring mixins' conventions (kubernetes-mixin, mixtool lint).
SEVERITIES = ("info", "warning", "critical")
MAX_ALERT_NAME = 40
MAX_RULES_PER_GROUP = 20
_CAMEL_CASE = re.compile(r"[A-Z][A-Za-z0-9]*")  # (acronyms allowed: KubeAPIDown)


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    anchor = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return anchor.replace(" ", "-")


def check_rules(rules: Mapping[str, Any], known: Iterable[str], runbook: str | None) -> list[str]:
    """Problems in a parsed alert rules file; *runbook* is docs/alerts.md's text, if at hand.

    Besides the metric names and the runbook links, the monitoring mixins' conventions:
    CamelCase alert names of at most 40 characters, ``severity`` one of info, warning or
    critical, a plain ``summary`` (no template) and a templated ``description``, at most 20
    rules a group."""
    known = frozenset(known)
    problems: list[str] = []
    anchors = (
        {github_anchor(line.lstrip("#")) for line in runbook.splitlines() if line.startswith("#")}
        if runbook is not None
        else None
    )
    alerts = 0
    for group in rules.get("groups", []):
        if len(group.get("rules", [])) > MAX_RULES_PER_GROUP:
            problems.append(f"group {group.get('name')}: over {MAX_RULES_PER_GROUP} rules")
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
            severity = (rule.get("labels") or {}).get("severity")
            if severity is None:
                problems.append(f"{name}: no severity label")
            elif severity not in SEVERITIES:
                problems.append(f"{name}: severity must be one of {', '.join(SEVERITIES)}")
            if not _CAMEL_CASE.fullmatch(name) or len(name) > MAX_ALERT_NAME:
                problems.append(f"{name}: the name must be CamelCase, {MAX_ALERT_NAME} at most")
            if "{{" in str(annotations.get("summary", "")):
                problems.append(f"{name}: the summary must be a plain sentence (no template)")
            if annotations.get("description") and "{{" not in str(annotations["description"]):
                problems.append(f"{name}: the description must say which series (a template)")
    if alerts == 0:
        problems.append("no alerting rules")
    return problems
