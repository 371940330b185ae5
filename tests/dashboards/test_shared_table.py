"""Two demo processes on one real Redis, one real Prometheus scraping both: the shared table
is counted once by every table-state panel query and by the table alerts.

Both demos run ``mcp-cancellation demo --redis URL`` (one table, one ``storage`` label
value). Long ``stubborn_sleep`` calls are held open on each demo and cancelled through the
*other* demo, so that each process tracks some of the in-flight rows and both export the
whole table. Then, at one evaluation time, each query that names only table-state gauges
must give the same answer whether Grafana selects all instances, only the first or only
the second, and the answers must be the table's real counts, not twice them.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from mcp_cancellation.dashboards._generation import DASHBOARDS
from mcp_cancellation.dashboards._validation import metric_names_in, panel_queries, substitute
from mcp_cancellation.telemetry.prometheus._catalogue import TABLE_STATE

from ..processes import DemoProcess, PrometheusServer
from ..support import RedisServer, async_wait_until
from ._rules import load_dashboard, load_rules, rules_with_short_for
from ._traffic import cancel, held_calls

pytestmark = [pytest.mark.prometheus, pytest.mark.e2e, pytest.mark.redis, pytest.mark.timeout(120)]

QUOTA = 4
CAP = 8
HOG = "192.0.2.200"  # 6 calls, 4 cancellations recorded (its quota), 2 refused
OTHER = "192.0.2.201"  # 3 calls, 3 cancellations: 75% of its quota
RATE_WINDOW = "10s"


def _by_labels(result: list[dict[str, Any]]) -> dict[frozenset[tuple[str, str]], float]:
    return {frozenset(r["metric"].items()): float(r["value"][1]) for r in result}


def _scalar(prometheus: PrometheusServer, expr: str, at: float) -> float | None:
    result = prometheus.query(expr, time=at)
    return float(result[0]["value"][1]) if len(result) == 1 else None


async def test_two_demos_on_one_redis_count_the_table_once(tmp_path: Path) -> None:
    args = (
        *("--trusted-proxy", "127.0.0.1", "--log-level", "warning"),
        *("--max-rows", str(CAP), "--max-rows-per-scope", str(QUOTA)),
        *("--stream-cancel-timeout", "1"),
    )
    with RedisServer() as redis:
        redis_args = ("--redis", redis.url, "--redis-prefix", "shared-table-test")
        with (
            DemoProcess(*args, *redis_args, log=tmp_path / "demo-a.log") as a,
            DemoProcess(*args, *redis_args, log=tmp_path / "demo-b.log") as b,
            PrometheusServer(
                [f"127.0.0.1:{a.port}", f"127.0.0.1:{b.port}"],
                rule_files=[rules_with_short_for(tmp_path)],
            ) as prometheus,
        ):
            storage = f"redis://127.0.0.1:{redis.port}/0?prefix=shared-table-test"
            instances = {"a": f"127.0.0.1:{a.port}", "b": f"127.0.0.1:{b.port}"}
            async with (
                httpx.AsyncClient(timeout=30, trust_env=False) as client,
                held_calls(client, f"{a.url}/mcp", HOG, range(1, 5)),
                held_calls(client, f"{b.url}/mcp", HOG, range(5, 7)),
                held_calls(client, f"{b.url}/mcp", OTHER, range(1, 4)),
            ):
                # Every call is in flight once the shared table says so (either demo).
                def in_flight(url: str) -> float:
                    text = httpx.get(f"{url}/metrics", trust_env=False).text
                    return sum(
                        float(line.rsplit(" ", 1)[1])
                        for line in text.splitlines()
                        if line.startswith("mcp_cancellation_in_flight{")
                    )

                await async_wait_until(lambda: in_flight(a.url) == 9, within=30, interval=0.1)
                # Cancel each call through the other demo: a shared table, pushed across.
                statuses = [await cancel(client, f"{b.url}/mcp", HOG, i) for i in range(1, 5)]
                statuses += [await cancel(client, f"{a.url}/mcp", HOG, i) for i in (5, 6)]
                statuses += [await cancel(client, f"{a.url}/mcp", OTHER, i) for i in (1, 2, 3)]
                assert statuses == [202] * 4 + [429, 429] + [202] * 3

                # Both instances' latest scrapes show the whole table.
                def scraped() -> bool:
                    rows = _by_labels(prometheus.query("sum by (instance) (mcp_cancellation_rows)"))
                    return len(rows) == 2 and set(rows.values()) == {7.0}

                await async_wait_until(scraped, within=30, interval=0.5)
                await asyncio.sleep(0)
                at = time.time()

                # 1. Each table-state query reads the same with all, a or b selected.
                checked = 0
                for name in sorted(DASHBOARDS):
                    for query in panel_queries(load_dashboard(name)):
                        if not metric_names_in(query.expr) <= TABLE_STATE:
                            continue
                        answers = {
                            who: _by_labels(
                                prometheus.query(
                                    substitute(query.expr, RATE_WINDOW, instance=instance),
                                    time=at,
                                )
                            )
                            for who, instance in {"all": ".+", **instances}.items()
                        }
                        where = f"{query.dashboard} / {query.panel} [{query.ref_id}]"
                        assert answers["all"], f"{where}: no data"
                        assert answers["all"] == answers["a"] == answers["b"], (where, answers)
                        checked += 1
                assert checked >= 15

                # 2. ... and they are the table's counts, not N times them.
                def panel(title: str, ref: str = "A") -> str:
                    for name in sorted(DASHBOARDS):
                        for query in panel_queries(load_dashboard(name)):
                            if query.panel == title and query.ref_id == ref:
                                return substitute(query.expr, RATE_WINDOW)
                    raise AssertionError(f"no panel {title}")

                assert _scalar(prometheus, panel("Rows held"), at) == 7
                assert _scalar(prometheus, panel("Requests in flight"), at) == 9
                assert _scalar(prometheus, panel("Table fill"), at) == 7 / CAP
                top = _by_labels(prometheus.query(panel("Top scopes by rows"), time=at))
                assert top == {
                    frozenset({("scope", f"ip:{HOG}")}): QUOTA,
                    frozenset({("scope", f"ip:{OTHER}")}): 3,
                }
                # The per-table line of the overview's table: one line, the real counts.
                tables = _by_labels(prometheus.query(panel("Tables", "A"), time=at))
                assert tables == {frozenset({("storage", storage)}): 7}
                processes = _by_labels(prometheus.query(panel("Tables", "E"), time=at))
                assert processes == {frozenset({("storage", storage)}): 2}
                # Counters are per process and add up: the two refusals were made by a.
                refused = 'sum(mcp_cancellation_rejected_total{reason="quota"})'
                assert _scalar(prometheus, refused, at) == 2

                # 3. The pinned-at-quota expression and the alerts: once per table (and scope).
                rules = {r["alert"]: r["expr"] for g in load_rules()["groups"] for r in g["rules"]}
                pinned = _by_labels(
                    prometheus.query(rules["MCPCancellationScopePinnedAtQuota"], time=at)
                )
                assert pinned == {
                    frozenset(
                        {
                            ("job", "mcp-cancellation-demo"),
                            ("storage", storage),
                            ("scope", f"ip:{HOG}"),
                        }
                    ): 1.0
                }
                near_cap = _by_labels(
                    prometheus.query(rules["MCPCancellationTableNearCap"], time=at)
                )
                assert near_cap == {
                    frozenset({("job", "mcp-cancellation-demo"), ("storage", storage)}): 7 / CAP
                }

                def firing() -> dict[str, int]:
                    counts: dict[str, int] = {}
                    for alert in prometheus.alerts():
                        if alert["state"] == "firing":
                            name = alert["labels"]["alertname"]
                            counts[name] = counts.get(name, 0) + 1
                    return counts

                wanted = {"MCPCancellationScopePinnedAtQuota": 1, "MCPCancellationTableNearCap": 1}
                await async_wait_until(
                    lambda: {k: firing().get(k) for k in wanted} == wanted, within=20, interval=0.5
                )
                assert "MCPCancellationStorageDown" not in firing()
