"""``./dev``: help on request exits 0, an unknown command prints the same usage and exits 2.

(The set-up each command does is exercised by every run of ``./dev test`` itself, and by
CI on a fresh clone.)"""

from __future__ import annotations

import subprocess

import pytest

from ..support import project_root

#: (Each builds a wheel or a virtualenv: seconds, left out of ./dev quick.)
pytestmark = pytest.mark.slow


def _dev(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(project_root() / "dev"), *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.mark.parametrize("flag", ["help", "--help", "-h"])
def test_help_prints_usage_and_exits_0(flag: str) -> None:
    done = _dev(flag)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: ./dev COMMAND [ARGS]\n")
    for command in ("demo", "client", "test", "bench", "help"):
        assert f"\n  {command} " in done.stdout
    assert "set -" not in done.stdout  # no stray shell lines
    assert done.stderr == ""


def test_no_command_prints_usage() -> None:
    done = _dev()
    assert done.returncode == 0
    assert done.stdout == _dev("help").stdout


def test_an_unknown_command_prints_usage_and_exits_2() -> None:
    done = _dev("frobnicate")
    assert done.returncode == 2
    assert "./dev: unknown command frobnicate" in done.stderr
    assert _dev("help").stdout in done.stderr
