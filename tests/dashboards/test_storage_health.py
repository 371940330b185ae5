"""Redis SIGKILLed under a running demo, then restarted, with a real Prometheus scraping:
``/metrics`` keeps answering, ``storage_up`` goes to 0 and back to 1, the errors counter
rises, ``MCPCancellationStorageDown`` fires and resolves, and tool calls are served
throughout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from mcp_cancellation.dashboards._validation import panel_queries, substitute

from ..jsonrpc import SSE_AND_JSON, call_body
from ..processes import DemoProcess, PrometheusServer
from ..support import RedisServer, wait_until
from ._rules import load_dashboard, rules_with_short_for

pytestmark = [pytest.mark.prometheus, pytest.mark.e2e, pytest.mark.redis, pytest.mark.timeout(120)]

ALERT = "MCPCancellationStorageDown"


def _value(result: list[dict[str, Any]]) -> float | None:
    return float(result[0]["value"][1]) if len(result) == 1 else None


def test_a_redis_crash_is_visible_and_heals(tmp_path: Path) -> None:
    with RedisServer() as redis:
        args = ("--redis", redis.url, "--redis-prefix", "outage-test", "--log-level", "info")
        with (
            DemoProcess(*args, log=tmp_path / "demo.log") as demo,
            PrometheusServer(
                [f"127.0.0.1:{demo.port}"], rule_files=[rules_with_short_for(tmp_path)]
            ) as prometheus,
        ):
            (health_panel,) = [
                q
                for q in panel_queries(load_dashboard("overview.json"))
                if q.panel == "Storage up, per instance"
            ]
            up = substitute(health_panel.expr)
            errors = "sum(mcp_cancellation_storage_errors_total)"

            def alert_states() -> set[str]:
                return {
                    a["state"] for a in prometheus.alerts() if a["labels"]["alertname"] == ALERT
                }

            wait_until(lambda: _value(prometheus.query(up)) == 1, timeout=20, interval=0.25)
            assert _value(prometheus.query(errors)) == 0
            assert alert_states() == set()

            redis.kill()
            # /metrics answers (bounded by the bridge's stats_timeout) and says so.
            scrape = httpx.get(f"{demo.url}/metrics", timeout=10, trust_env=False)
            assert scrape.status_code == 200
            assert 'mcp_cancellation_storage_up{storage="' in scrape.text
            assert "} 0.0" in next(
                line
                for line in scrape.text.splitlines()
                if line.startswith("mcp_cancellation_storage_up{")
            )
            wait_until(lambda: _value(prometheus.query(up)) == 0, timeout=20, interval=0.25)
            wait_until(lambda: (_value(prometheus.query(errors)) or 0) > 0, timeout=20)
            wait_until(lambda: alert_states() == {"firing"}, timeout=20, interval=0.25)
            (alert,) = [a for a in prometheus.alerts() if a["labels"]["alertname"] == ALERT]
            assert (
                alert["labels"]["storage"] == f"redis://127.0.0.1:{redis.port}/0?prefix=outage-test"
            )
            assert alert["labels"]["severity"] == "critical"
            # Tool calls are still served while the storage is away.
            call = call_body(1, "echo", {"text": "still here"})
            reply = httpx.post(
                f"{demo.url}/mcp", json=call, headers=SSE_AND_JSON, timeout=30, trust_env=False
            )
            assert reply.status_code == 200
            assert "still here" in reply.text

            redis.start()  # same port: the storage reconnects by itself
            wait_until(lambda: _value(prometheus.query(up)) == 1, timeout=30, interval=0.25)
            wait_until(lambda: alert_states() == set(), timeout=20, interval=0.25)
            log = (tmp_path / "demo.log").read_text(encoding="utf-8")
            assert "Redis storage unavailable" in log
            assert "Redis storage answers again" in log
