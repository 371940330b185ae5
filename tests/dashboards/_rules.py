"""The dashboards and alert rules as the tests load them, and ``promtool`` to check them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import yaml

from ..processes import binary
from ..support import project_root

DASHBOARDS = project_root() / "dashboards"

#: ``for:`` of every alert in the end-to-end test (production values are minutes).
E2E_FOR = "1s"


def load_dashboard(name: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((DASHBOARDS / name).read_text(encoding="utf-8"))
    return document


def load_rules() -> dict[str, Any]:
    """The committed ``dashboards/alerts.yaml``, parsed."""
    rules: dict[str, Any] = yaml.safe_load((DASHBOARDS / "alerts.yaml").read_text(encoding="utf-8"))
    return rules


def rules_with_short_for(directory: Path) -> Path:
    """``alerts.yaml`` with every ``for:`` (where there is one) set to :data:`E2E_FOR`,
    written in *directory*.

    Same expressions, thresholds, labels and annotations: a test cannot wait the production
    minutes, and the promtool unit tests check the real ``for:`` durations.
    """
    rules = load_rules()
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "alert" in rule and "for" in rule:
                rule["for"] = E2E_FOR
    path = directory / "alerts-e2e.yaml"
    path.write_text(yaml.safe_dump(rules, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    """Run Prometheus's ``promtool`` with *args* (its outcome is the caller's to check)."""
    return subprocess.run(
        [binary("promtool"), *args], capture_output=True, text=True, timeout=60, check=False
    )
