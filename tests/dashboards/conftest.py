"""Dashboard tests: tests marked ``prometheus`` need Debian's prometheus package.

``./dev test`` installs it (``apt-get install prometheus``, which provides ``prometheus``
and ``promtool``). Without it those tests fail with that instruction rather than skip, so
a green run always means the rules and dashboards were checked against the real programs.
"""

from __future__ import annotations

import shutil

import pytest


@pytest.fixture(autouse=True)
def _prometheus_binaries(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("prometheus") is None:
        return
    missing = [name for name in ("prometheus", "promtool") if shutil.which(name) is None]
    if missing:
        pytest.fail(
            f"{', '.join(missing)} not installed: run ./dev test, or apt-get install prometheus"
        )
