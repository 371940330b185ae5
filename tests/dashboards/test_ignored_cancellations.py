"""Does cancellation stop the work? The demo under the simulator's ``--ignorers`` scenario,
scraped by a real Prometheus: the cancel-to-stop histogram has ``stopped`` (slow_count
polls) and ``completed`` (ignores_cancellation does not) observations, the "tools that
ignore cancellation" panel names the ignoring tool, and
``MCPCancellationToolIgnoresCancellation`` fires for that tool only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mcp_cancellation.dashboards._validation import panel_queries, substitute

from ..processes import DemoProcess, PrometheusServer, start_simulator, stop_process
from ..support import wait_until
from ._rules import load_dashboard, rules_with_short_for

pytestmark = [pytest.mark.prometheus, pytest.mark.e2e, pytest.mark.timeout(120)]

ALERT = "MCPCancellationToolIgnoresCancellation"
IGNORING = "ignores_cancellation"


def _panel(title: str) -> str:
    (query, *_) = [q for q in panel_queries(load_dashboard("overview.json")) if q.panel == title]
    return substitute(query.expr, "5s")


def _by(result: list[dict[str, Any]], label: str) -> dict[str, float]:
    return {r["metric"].get(label, ""): float(r["value"][1]) for r in result}


def test_a_tool_that_ignores_cancellation_is_shown_and_alerted(tmp_path: Path) -> None:
    with (
        DemoProcess("--cancel-grace", "1", log=tmp_path / "demo.log") as demo,
        PrometheusServer(
            [f"127.0.0.1:{demo.port}"], rule_files=[rules_with_short_for(tmp_path)]
        ) as prometheus,
    ):
        simulator = start_simulator(
            demo.url,
            tmp_path / "simulate.log",
            *("--duration", "90", "--clients", "1", "--call-seconds", "5", "--hogs", "0"),
            *("--flood-rate", "0", "--ignorers", "1", "--ignorer-call-seconds", "6"),
            *("--seed", "15", "--no-progress"),
        )
        try:
            outcomes = "sum by (outcome) (mcp_cancellation_cancel_to_stop_seconds_count)"

            def both_outcomes() -> bool:
                seen = _by(prometheus.query(outcomes), "outcome")
                return seen.get("stopped", 0) > 0 and seen.get("completed", 0) > 0

            wait_until(both_outcomes, timeout=60, interval=0.5)

            ignoring = _panel("Tools that ignore cancellation")
            wait_until(
                lambda: IGNORING in _by(prometheus.query(ignoring), "tool"),
                timeout=30,
                interval=0.25,
            )
            heatmap = _panel("Cancel-to-stop latency")
            wait_until(lambda: bool(prometheus.query(heatmap)), timeout=30, interval=0.5)

            def firing() -> set[str]:
                return {
                    a["labels"]["tool"]
                    for a in prometheus.alerts()
                    if a["labels"]["alertname"] == ALERT and a["state"] == "firing"
                }

            wait_until(lambda: firing() == {IGNORING}, timeout=45, interval=0.25)
            # Only the tool that ignores its cancellations: slow_count stops when cancelled.
            tools = {
                a["labels"]["tool"]
                for a in prometheus.alerts()
                if a["labels"]["alertname"] == ALERT
            }
            assert tools == {IGNORING}
            ended = "sum by (tool) (mcp_cancellation_cancellations_ignored_total)"
            wait_until(
                lambda: _by(prometheus.query(ended), "tool").get(IGNORING, 0) > 0, timeout=30
            )
            assert _by(prometheus.query(ended), "tool").get("slow_count", 0) == 0
        finally:
            stop_process(simulator)
