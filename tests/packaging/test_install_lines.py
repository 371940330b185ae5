"""Every install line the documentation gives resolves, together with every extra the
package declares (``[fastmcp]`` included): pip's resolver, run for real against the
package index (``--dry-run``: nothing is installed)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from ..support import project_root

#: (Each builds a wheel or a virtualenv: seconds, left out of ./dev quick.)
pytestmark = pytest.mark.slow

#: A ``pip install`` line in a document (a fenced command, or inline code), up to its end.
_LINE = re.compile(r"pip install ((?:[^`\n\\]|\\\n)+)")


def documented_requirements(root: Path) -> set[str]:
    """The requirements of every ``pip install`` line in the README and docs/, with this
    package's own (``mcp-cancellation[...]``) and pip's options left out."""
    found: set[str] = set()
    for path in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        for match in _LINE.finditer(path.read_text(encoding="utf-8")):
            words = shlex.split(match.group(1).replace("\\\n", " "), comments=True)
            for word in words:
                if word.startswith(("-", "mcp-cancellation")):
                    continue
                if re.match(r"^[A-Za-z0-9][A-Za-z0-9._\-\[\],]*([=<>!~].*)?$", word):
                    found.add(word)
    return found


def test_the_documented_lines_include_the_zero_code_opentelemetry_one() -> None:
    assert "opentelemetry-distro==0.66b2" in documented_requirements(project_root())


def test_all_names_every_extra() -> None:
    project = tomllib.loads((project_root() / "pyproject.toml").read_text())["project"]
    extras = set(project["optional-dependencies"]) - {"all"}
    (line,) = project["optional-dependencies"]["all"]
    named = set(line.partition("[")[2].rstrip("]").split(","))
    assert named == extras


@pytest.mark.timeout(600)
def test_every_documented_line_resolves_with_every_extra(tmp_path: Path) -> None:
    root = project_root()
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    extras = ",".join(sorted(project["optional-dependencies"]))
    requirements = sorted(documented_requirements(root))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "--disable-pip-version-check",
            "--quiet",
            f"{root}[{extras}]",
            *requirements,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
