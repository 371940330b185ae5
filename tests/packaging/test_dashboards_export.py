"""``mcp-cancellation dashboards export`` on a bare install: the built wheel, no extra, no
pyyaml. It writes the same files as this repository's ``dashboards/``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ..support import project_root

#: (Each builds a wheel or a virtualenv: seconds, left out of ./dev quick.)
pytestmark = pytest.mark.slow

DASHBOARDS = project_root() / "dashboards"


def test_export_from_the_wheel_without_extras(bare_venv: Path, tmp_path: Path) -> None:
    script = bare_venv.parent / "mcp-cancellation"
    no_yaml = subprocess.run(
        [str(bare_venv), "-c", "import yaml"], capture_output=True, text=True, timeout=60
    )
    assert no_yaml.returncode != 0  # really no pyyaml here
    target = tmp_path / "not" / "there" / "yet"
    done = subprocess.run(
        [str(script), "dashboards", "export", str(target)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    names = sorted(p.name for p in target.iterdir())
    # (export.json: the options, which the dashboards check regenerates the files from)
    assert names == ["abusive-scopes.json", "alerts.yaml", "export.json", "overview.json"]
    for name in names:
        if name != "export.json":
            assert (target / name).read_bytes() == (DASHBOARDS / name).read_bytes(), name

    operator = tmp_path / "operator"
    done = subprocess.run(
        [
            str(script),
            "dashboards",
            "export",
            str(operator),
            "--format",
            "prometheus-rule",
            "--selector",
            'job="mcp"',
            "--datasource",
            "prom-main",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert (operator / "alerts.prometheusrule.yaml").read_text().count("kind: PrometheusRule") == 1
    assert '"uid": "prom-main"' in (operator / "overview.json").read_text()
