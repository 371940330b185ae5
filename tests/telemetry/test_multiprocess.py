"""Multi-process mode: real worker processes share PROMETHEUS_MULTIPROC_DIR."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ..support import env
from ._util import samples, series, value

P = "mcp_cancellation_"
WORKER = Path(__file__).with_name("_mp_worker.py")


def run(directory: Path, *args: str) -> str:
    with env(PROMETHEUS_MULTIPROC_DIR=str(directory)):
        done = subprocess.run(
            [sys.executable, str(WORKER), *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=dict(os.environ),
            check=False,
        )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_counters_and_rejections_add_up_across_workers(tmp_path: Path) -> None:
    run(tmp_path, "work", "3")
    run(tmp_path, "work-live", "5")
    parsed = samples(run(tmp_path, "scrape"))
    # Counters: 3 + 2 and 5 + 2 ip cancellations, 3 + 5 rejections, plus the scraper's own.
    assert value(parsed, P + "cancelled_total", scope_kind="ip") == 12
    assert value(parsed, P + "cancelled_total", scope_kind="principal") == 1
    assert value(parsed, P + "rejected_total", scope_kind="ip", reason="quota") == 8
    assert value(parsed, P + "rejected_total", scope_kind="ip", reason="invalid_request_id") == 0
    # The heavy hitters of every worker are summed.
    assert series(parsed, P + "scope_rejections") == {frozenset({("scope", "ip:203.0.113.66")}): 8}
    # Row gauges come from the storage seen by the answering worker: with MemoryStorage,
    # only its own rows.
    assert value(parsed, P + "rows", scope_kind="ip") == 0
    assert value(parsed, P + "rows", scope_kind="principal") == 1
    assert series(parsed, P + "scope_rows") == {frozenset({("scope", "principal:scraper")}): 1}
