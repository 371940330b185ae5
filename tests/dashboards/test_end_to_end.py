"""End to end: demo server, real Prometheus, simulated traffic, every panel query, the alert.

``mcp-cancellation demo`` runs in a subprocess with a small quota and cap, behind
``--trusted-proxy 127.0.0.1`` so the simulator's ``X-Forwarded-For`` addresses become
scopes. A real Prometheus scrapes its ``/metrics`` every second and evaluates
``dashboards/alerts.yaml`` every second (with ``for:`` shortened, see
:func:`._rules.rules_with_short_for`). While ``mcp-cancellation simulate`` runs:

* ``MCPCancellationQuotaRejectionSpike`` must reach ``firing`` (``/api/v1/alerts``);
* every query of every panel of both dashboards, with ``$__rate_interval`` replaced by a
  concrete window and the ``job``/``instance`` variables by what Grafana sends for "All",
  must return data through ``/api/v1/query``.

Afterwards the flood's addresses must hold no rows (the defence), the simulator's counts
must agree, and both dashboards are drawn from the recorded data (PNG, see _render.py).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from mcp_cancellation.dashboards._generation import DASHBOARDS
from mcp_cancellation.dashboards._validation import panel_queries, substitute

from ..processes import DemoProcess, PrometheusServer, start_simulator, stop_process
from ..support import project_root, wait_until
from ._render import render
from ._rules import load_dashboard, rules_with_short_for

pytestmark = [pytest.mark.prometheus, pytest.mark.e2e, pytest.mark.timeout(110)]

#: Stands in for $__rate_interval (Grafana's is 4 x the 1 s scrape interval; a little more
#: keeps every rate defined while the simulator's traffic comes in bursts).
RATE_WINDOW = "10s"
#: The simulator's time limit; the test stops it (SIGINT) as soon as it has what it needs
#: (and, when it renders the docs' pictures, PICTURE_SECONDS of data for them), so this only
#: bounds a slow machine.
SIMULATION_SECONDS = 50
PICTURE_SECONDS = 20
RENDER_DOCS = os.environ.get("MCP_CANCELLATION_RENDER_DOCS") == "1"
QUOTA = 8
CAP = 2 * QUOTA  # two hogs at quota fill it: any client cancellation evicts
FLOOD_SCOPES = "ip:(198[.]51[.]100[.]|203[.]0[.]113[.]|2001:db8:).*"
HOG_SCOPES = "ip:192[.]0[.]2[.]20[01]"


def _has_data(result: list[dict[str, Any]]) -> bool:
    return any(r.get("value") or r.get("values") for r in result)


def test_dashboards_and_alerts_against_real_prometheus(tmp_path: Path) -> None:
    demo_args = (
        *("--trusted-proxy", "127.0.0.1", "--log-level", "warning"),
        *("--max-rows", str(CAP), "--max-rows-per-scope", str(QUOTA)),
    )
    queries = [
        query for name in sorted(DASHBOARDS) for query in panel_queries(load_dashboard(name))
    ]
    with (
        DemoProcess(*demo_args, log=tmp_path / "demo.log") as demo,
        PrometheusServer(
            [f"127.0.0.1:{demo.port}"], rule_files=[rules_with_short_for(tmp_path)]
        ) as prometheus,
    ):
        wait_until(lambda: _has_data(prometheus.query("mcp_cancellation_max_rows")), timeout=15)
        start = time.time()
        simulator = start_simulator(
            demo.url,
            tmp_path / "simulate.log",
            *("--duration", str(SIMULATION_SECONDS), "--clients", "4", "--hogs", "2"),
            *("--flood-rate", "80", "--seed", "6"),
        )
        try:
            # 1. The quota-rejection alert fires while the hogs push.
            def firing() -> bool:
                return any(
                    a["labels"]["alertname"] == "MCPCancellationQuotaRejectionSpike"
                    and a["state"] == "firing"
                    for a in prometheus.alerts()
                )

            wait_until(firing, timeout=SIMULATION_SECONDS - 15, interval=0.5)
            print(f"alert firing after {time.time() - start:.1f} s")
            alert = next(
                a
                for a in prometheus.alerts()
                if a["labels"]["alertname"] == "MCPCancellationQuotaRejectionSpike"
            )
            assert alert["labels"]["scope_kind"] == "ip"
            assert alert["annotations"]["runbook_url"].endswith(
                "docs/alerts.md#mcpcancellationquotarejectionspike"
            )

            # 2. Every panel query returns data, as Grafana would ask for it.
            missing: dict[str, str] = {}
            for query in queries:
                expr = substitute(query.expr, RATE_WINDOW)
                try:
                    wait_until(
                        lambda expr=expr: _has_data(prometheus.query(expr)),
                        timeout=8,
                        interval=0.5,
                    )
                except AssertionError:
                    missing[f"{query.dashboard} / {query.panel} [{query.ref_id}]"] = expr
            assert missing == {}, json.dumps(missing, indent=1)
            print(f"{len(queries)} panel queries answered after {time.time() - start:.1f} s")
            if RENDER_DOCS:
                time.sleep(max(0.0, start + PICTURE_SECONDS - time.time()))
        finally:
            simulator.send_signal(signal.SIGINT)  # stops cleanly and prints its counts
            try:
                out, _ = simulator.communicate(timeout=30)
            finally:
                stop_process(simulator)
        end = time.time()
        assert simulator.returncode == 0, (tmp_path / "simulate.log").read_text()
        stats = json.loads(out)
        print(stats)

        # 3. What the simulator saw agrees with the defence and with the metrics.
        assert stats["transport_errors"] == 0
        assert stats["http_errors"] == 0
        assert stats["calls_cancelled"] > 0  # well-behaved clients cancel their own calls
        assert stats["quota_rejected"] > 0  # hogs are refused past their quota
        assert stats["flood_ignored"] > 0.9 * stats["flood_sent"]  # flood: 202, ignored

        # Every refusal the simulator saw was counted (the server may count a few more: the
        # answers to requests in flight when the simulator stopped were never read).
        def counted() -> float:
            result = prometheus.query('sum(mcp_cancellation_rejected_total{reason="quota"})')
            return float(result[0]["value"][1])

        wait_until(lambda: counted() >= stats["quota_rejected"], timeout=10, interval=0.5)
        # The flood never held a row, in any scrape of the run.
        flood_rows = prometheus.query(
            f'max_over_time(mcp_cancellation_scope_rows{{scope=~"{FLOOD_SCOPES}"}}[5m])'
        )
        assert flood_rows == []
        hogs = prometheus.query(
            f'max_over_time(mcp_cancellation_scope_rows{{scope=~"{HOG_SCOPES}"}}[5m])'
        )
        assert len(hogs) == 2  # both hogs were among the top scopes by rows ...
        assert max(float(h["value"][1]) for h in hogs) == QUOTA  # ... one reached the quota,
        assert all(float(h["value"][1]) <= QUOTA for h in hogs)  # and none went past it
        evicted = prometheus.query("sum(mcp_cancellation_evicted_total)")
        assert float(evicted[0]["value"][1]) > 0

        # 4. Pictures of both dashboards from the recorded data.
        def fetch(expr: str, instant: bool) -> list[dict[str, Any]]:
            expr = substitute(expr, RATE_WINDOW)
            if instant:
                return prometheus.query(expr, time=end - 2)
            return prometheus.query_range(expr, start, end, step=1)

        images = tmp_path / "img"
        for name in sorted(DASHBOARDS):
            render(
                load_dashboard(name),
                fetch,
                images / name.replace(".json", ".png"),
                subtitle=f"  (end-to-end test: demo + simulate, {end - start:.0f} s)",
            )
            assert (images / name.replace(".json", ".png")).stat().st_size > 10_000
        if RENDER_DOCS:
            target = project_root() / "docs" / "img"
            target.mkdir(parents=True, exist_ok=True)
            for image in images.iterdir():
                shutil.copyfile(image, target / f"dashboard-{image.name}")
