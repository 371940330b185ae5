"""The house rules that no linter checks: every module of the package stays short enough
to read in one sitting (450 lines at most)."""

from __future__ import annotations

from ..support import project_root

MAX_LINES = 450


def test_no_module_is_over_450_lines() -> None:
    package = project_root() / "src" / "mcp_cancellation"
    sizes = {
        str(path.relative_to(package)): len(path.read_text(encoding="utf-8").splitlines())
        for path in package.rglob("*.py")
    }
    assert len(sizes) > 50  # the whole package was read
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}
