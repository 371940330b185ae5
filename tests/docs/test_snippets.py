"""Every Python block in README.md and docs/ is a program a user can paste: it parses, it
imports what it uses, and it awaits only inside coroutines. A block that continues an
earlier one (it uses its ``registry``, ``app``, ``server``...) says so with a
``<!-- fragment -->`` line just before it, and is checked for syntax only."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ..support import project_root

BLOCK = re.compile(r"(<!-- fragment -->\n)?```python\n(.*?)```", re.S)
FILES = sorted([project_root() / "README.md", *(project_root() / "docs").glob("*.md")])


def blocks() -> list[tuple[str, str, bool]]:
    found = []
    for path in FILES:
        text = path.read_text(encoding="utf-8")
        for match in BLOCK.finditer(text):
            line = text[: match.start(2)].count("\n")
            found.append((f"{path.name}:{line}", match.group(2), match.group(1) is not None))
    return found


def test_there_are_blocks_to_check() -> None:
    assert len(blocks()) >= 20


def test_every_block_is_a_program_or_a_fragment_that_parses(tmp_path: Path) -> None:
    names: dict[str, str] = {}
    for n, (where, code, fragment) in enumerate(blocks()):
        compile(code, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)  # names the block
        if not fragment:
            (tmp_path / f"block_{n}.py").write_text(code, encoding="utf-8")
            names[f"block_{n}.py"] = where
    ruff = Path(sys.executable).with_name("ruff")
    if not ruff.exists():  # pragma: no cover - the test group installs it
        pytest.fail("ruff is not installed beside this Python")
    found = subprocess.run(
        # Undefined names, and await outside a coroutine.
        [
            str(ruff),
            "check",
            "--isolated",
            "--select",
            "F821,F704",
            "--output-format",
            "concise",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    problems = [
        re.sub(r"\S*(block_\d+\.py)", lambda m: names[m.group(1)], line)
        for line in found.stdout.splitlines()
        if "block_" in line
    ]
    assert problems == [], "\n".join(problems)
