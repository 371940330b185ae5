"""Fixtures for the packaging tests: the wheel and sdist built from this checkout, and a
clean virtualenv with the wheel installed and no extra."""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv
from pathlib import Path

import blinker
import pytest
import sortedcontainers

from ..support import project_root


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``dist/`` with the wheel and the sdist, built by hatchling as pip would."""
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-t", "sdist", "-d", str(out)],
        cwd=project_root(),
        check=True,
        capture_output=True,
    )
    return out


@pytest.fixture(scope="session")
def bare_venv(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new virtualenv holding the wheel and its dependencies (blinker,
    sortedcontainers), no extra.

    Nothing is downloaded: pip installs the local wheel without dependencies, and the
    dependencies (pure Python) are copied from the test environment.
    """
    home = tmp_path_factory.mktemp("bare-venv")
    venv.create(home, with_pip=True, symlinks=True)
    python = home / "bin" / "python"
    (wheel,) = dist.glob("*.whl")
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", str(wheel)],
        check=True,
        capture_output=True,
    )
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    for dependency in (blinker, sortedcontainers):
        assert dependency.__file__ is not None
        shutil.copytree(Path(dependency.__file__).parent, site / dependency.__name__)
    return python
