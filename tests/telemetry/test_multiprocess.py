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
    assert value(parsed, P + "cancelled_total", scope_kind="session") == 80
    # Each worker's cap evicted its n + 2 ip rows (5 + 7, the offender's two in one
    # eviction), and, batches being of 2, one session row each.
    assert value(parsed, P + "evicted_total", scope_kind="ip") == 12
    assert value(parsed, P + "evicted_total", scope_kind="session") == 2
    assert value(parsed, P + "rejected_total", scope_kind="ip", reason="quota", mode="enforce") == 8
    assert (
        value(
            parsed,
            P + "rejected_total",
            scope_kind="ip",
            reason="invalid_request_id",
            mode="enforce",
        )
        == 0
    )
    # The heavy hitters of every worker are summed.
    offender = frozenset({("scope", "ip:203.0.113.66"), ("reason", "quota")})
    assert series(parsed, P + "scope_rejections") == {offender: 8}
    # Row gauges come from the storage seen by the answering worker: with MemoryStorage,
    # only its own rows, labelled as its own table.
    (storage,) = {dict(labels)["storage"] for labels in series(parsed, P + "rows")}
    assert storage.startswith("memory://")
    assert value(parsed, P + "rows", storage=storage, scope_kind="ip") == 0
    assert value(parsed, P + "rows", storage=storage, scope_kind="principal") == 1
    assert series(parsed, P + "scope_rows") == {
        frozenset({("storage", storage), ("scope", "principal:scraper")}): 1
    }
    assert value(parsed, P + "storage_up", storage=storage) == 1


def test_workers_share_one_selection_of_rejected_scopes(tmp_path: Path) -> None:
    """Each scrape may reach another worker: they export the same scopes, from one
    shared selection, so the admission budget holds across workers."""
    run(tmp_path, "work", "3")
    first = series(samples(run(tmp_path, "scrape")), P + "scope_rejections")
    second = series(samples(run(tmp_path, "scrape")), P + "scope_rejections")
    assert (
        set(first)
        == set(second)
        == {frozenset({("scope", "ip:203.0.113.66"), ("reason", "quota")})}
    )
    assert (tmp_path / "mcp_cancellation_exported_scopes.json").exists()
