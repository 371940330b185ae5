"""A flood of rejected cancellations from 20 000 rotating addresses, against the demo and a
real Prometheus: the ``scope`` values of ``mcp_cancellation_scope_rejections`` in any
2-minute window stay at most ``2 * top_k``, and the real offenders are among them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ..processes import DemoProcess, PrometheusServer, start_simulator, stop_process
from ..support import wait_until

pytestmark = [pytest.mark.prometheus, pytest.mark.e2e, pytest.mark.timeout(110)]

TOP_K = 5
ADDRESSES = 20_000
HOGS = 2
HOG_SERIES = (("ip:192.0.2.200", "quota"), ("ip:192.0.2.201", "quota"))


def _values(result: list[dict[str, Any]]) -> list[float]:
    return [float(r["value"][1]) for r in result]


def test_rotating_flood_keeps_rejection_series_bounded(tmp_path: Path) -> None:
    args = (
        "--trusted-proxy",
        "127.0.0.1",
        "--max-rows-per-scope",
        "4",
        "--top-k",
        str(TOP_K),
        "--log-level",
        "warning",
    )
    with (
        DemoProcess(*args, log=tmp_path / "demo.log") as demo,
        PrometheusServer([f"127.0.0.1:{demo.port}"]) as prometheus,
    ):
        wait_until(lambda: prometheus.query("mcp_cancellation_max_rows") != [], timeout=15)
        # Phase 1: the hogs alone, until Prometheus shows both. With nothing else in the
        # summary they are certainly the top scopes, so the first scrape admits them.
        hogs_only = start_simulator(
            demo.url,
            tmp_path / "simulate-hogs.log",
            *("--duration", "60", "--clients", "0", "--hogs", "2", "--flood-rate", "0"),
            *("--seed", "11", "--no-progress"),
        )
        try:
            wait_until(lambda: _shown(prometheus) >= HOGS, timeout=45, interval=0.5)
        finally:
            stop_process(hogs_only)
        # Phase 2: the flood, a fixed amount of traffic however fast this machine is.
        simulator = start_simulator(
            demo.url,
            tmp_path / "simulate.log",
            *("--duration", "40", "--max-requests", "3000", "--clients", "1", "--hogs", "0"),
            *("--flood-rate", "1500", "--flood-addresses", str(ADDRESSES)),
            *("--flood-invalid-share", "1", "--seed", "12", "--no-progress"),
        )
        try:
            out, _ = simulator.communicate(timeout=60)
        finally:
            stop_process(simulator)
        assert simulator.returncode == 0, (tmp_path / "simulate.log").read_text()
        stats = json.loads(out)
        assert stats["transport_errors"] == 0
        assert stats["http_errors"] == 0
        # The flood was rejected (invalid ids), from far more distinct addresses than the
        # bound (a random pick of 20 000 addresses: nearly every rejection a new one).
        assert stats["invalid_rejected"] > 1_000

        invalid = 'sum(mcp_cancellation_rejected_total{reason="invalid_request_id"})'
        wait_until(
            lambda: _values(prometheus.query(invalid)) == [stats["invalid_rejected"]],
            timeout=15,
            interval=0.5,
        )
        # Every scope value exported during the whole run (less than 2 minutes).
        exported = prometheus.query(
            "count by (scope, reason) (count_over_time(mcp_cancellation_scope_rejections[2m]))"
        )
        scopes = {r["metric"]["scope"] for r in exported}
        print(f"{len(scopes)} scope values exported: {sorted(scopes)}")
        assert len(scopes) <= 2 * TOP_K
        # The real offenders, refused by the quota, were shown, under their reason.
        shown = {(r["metric"]["scope"], r["metric"]["reason"]) for r in exported}
        assert set(HOG_SERIES) <= shown


def _shown(prometheus: PrometheusServer) -> int:
    """How many of the hogs' series Prometheus has scraped."""
    result = prometheus.query('mcp_cancellation_scope_rejections{reason="quota"}')
    return len({r["metric"]["scope"] for r in result} & {scope for scope, _ in HOG_SERIES})
