"""One registry, both bridges, one real Prometheus: the OpenTelemetry path (the OTel SDK
and its Prometheus exporter) exports exactly the series of the prometheus_client path, and
every shipped dashboard query and alert expression reads the same through either.

The registry keeps its table in a real Redis, so the OTel gauges are read at collection
time from another thread (the exporter's), through ``Storage.stats_from_thread``.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry, make_asgi_app

from mcp_cancellation import (
    CancellationLimitReached,
    CancellationRegistry,
    InvalidRequestId,
    signals,
)
from mcp_cancellation._asgi import serve_lifespan
from mcp_cancellation.dashboards._generation import DASHBOARDS
from mcp_cancellation.dashboards._validation import panel_queries, substitute
from mcp_cancellation.storage.redis import RedisStorage
from mcp_cancellation.telemetry import otel
from mcp_cancellation.telemetry.prometheus import METRIC_NAMES, metrics_app
from mcp_cancellation.telemetry.prometheus._catalogue import SERIES

from ..dashboards._rules import load_dashboard, load_rules
from ..processes import PrometheusServer
from ..support import UvicornThread, async_wait_until

pytestmark = [pytest.mark.prometheus, pytest.mark.redis, pytest.mark.e2e, pytest.mark.timeout(90)]

IGNORED = {"instance", "job"}


def _series(result: list[dict[str, Any]]) -> dict[frozenset[tuple[str, str]], float]:
    return {
        frozenset((k, v) for k, v in r["metric"].items() if k not in IGNORED): float(r["value"][1])
        for r in result
    }


async def test_otel_exporter_matches_prometheus_client(redis_server: Any) -> None:
    storage = RedisStorage.from_url(redis_server.url, prefix="otel-vs-prometheus")
    registry = CancellationRegistry(
        storage, max_rows=6, max_rows_per_scope=2, janitor_interval=None, cancel_grace=0.05
    )
    prometheus_path = metrics_app(registry)
    exposition = CollectorRegistry()
    reader = PrometheusMetricReader(
        registry=exposition, scope_info_enabled=False, disable_target_info=True
    )
    provider = MeterProvider(metric_readers=[reader])
    otel.instrument(registry, meter_provider=provider, tracer_provider=TracerProvider())
    exporter_app = make_asgi_app(registry=exposition)

    async def otel_path(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":  # prometheus_client's app speaks HTTP only
            await serve_lifespan(receive, send)
            return
        await exporter_app(scope, receive, send)

    try:
        # Traffic: cancellations of every kind, both rejection reasons, an eviction.
        for request_id in (1, 2):
            await registry.cancel(request_id, None, "ip:192.0.2.1")
        with pytest.raises(CancellationLimitReached):
            await registry.cancel(3, None, "ip:192.0.2.1")
        with pytest.raises(InvalidRequestId):
            await registry.cancel(1.5, None, "ip:192.0.2.2")
        await registry.cancel(1, "stop", "principal:alice")
        await registry.cancel(1, None, "session:S3cr3t")
        await registry.cancel(2, None, "session:S3cr3t")
        await registry.cancel(1, None)
        await registry.cancel(1, None, "ip:192.0.2.3")  # the seventh row: evicts one
        # A cancelled request whose tool stopped, and one that ran past cancel_grace.
        async with registry.request(10, "principal:carol", tool="slow") as token:
            await registry.cancel_in_flight(10, None, "principal:carol")
            await async_wait_until(lambda: token.cancelled, within=10)
            token.mark_observed()
        async with registry.request(11, "principal:carol", tool="stubborn") as token:
            await registry.cancel_in_flight(11, None, "principal:carol")
            await async_wait_until(lambda: token in registry.ignoring(), within=10)
        # Tasks, as TasksExtension reports them: two ended, one running, one refused.
        for task_id, status in (("t1", "completed"), ("t2", "failed"), ("t3", None)):
            signals.task_created.send(registry, task_id=task_id, scope="ip:192.0.2.9", tool="slow")
            if status is not None:
                signals.task_ended.send(
                    registry,
                    task_id=task_id,
                    scope="ip:192.0.2.9",
                    tool="slow",
                    status=status,
                    seconds=1.5,
                )
        signals.task_rejected.send(registry, scope="ip:192.0.2.9", tool="slow", reason="quota")
        with (
            UvicornThread(prometheus_path) as a,
            UvicornThread(otel_path) as b,
            PrometheusServer([f"127.0.0.1:{a.port}", f"127.0.0.1:{b.port}"]) as prometheus,
        ):
            instance = {"prometheus_client": f"127.0.0.1:{a.port}", "otel": f"127.0.0.1:{b.port}"}
            async with registry.request(9, "principal:bob", tool="stubborn") as running:
                # Still running past cancel_grace while Prometheus scrapes: the gauge.
                await registry.cancel_in_flight(9, None, "principal:bob")
                await async_wait_until(lambda: running in registry.ignoring(), within=10)

                def query(expr: str, where: str) -> dict[frozenset[tuple[str, str]], float]:
                    expr = substitute(expr, "10s", instance=where)
                    return _series(prometheus.query(expr))

                async def both(expr: str) -> dict[str, dict[frozenset[tuple[str, str]], float]]:
                    # In a thread: the registry's Redis storage lives on this test's loop,
                    # which both exporters need running while Prometheus scrapes them.
                    return {
                        path: await asyncio.to_thread(query, expr, where)
                        for path, where in instance.items()
                    }

                async def agree(expr: str, empty: bool = False) -> None:
                    """Wait until both paths' latest scrapes give the same, non-empty answer
                    (each target is scraped on its own schedule; a scrape that overran its
                    1 s timeout leaves that target's series stale until the next one)."""
                    last: list[Any] = []

                    async def same() -> bool:
                        seen = await both(expr)
                        last[:] = [seen]
                        found = bool(seen["otel"]) or empty  # an alert that does not fire
                        return found and seen["otel"] == seen["prometheus_client"]

                    try:
                        await async_wait_until(same, within=15, interval=0.25)
                    except AssertionError:
                        raise AssertionError(f"{expr}: {last}") from None

                async def scraped() -> bool:
                    flights = await both("sum by (instance) (mcp_cancellation_in_flight)")
                    return all(v == {frozenset(): 1.0} for v in flights.values())

                await async_wait_until(scraped, within=30, interval=0.25)

                # 1. Every metric: the same series (names, label names and values).
                for name in sorted(METRIC_NAMES):
                    await agree(f'{name}{{instance=~"$instance"}}')
                # ... and the same types, as Prometheus recorded them.
                metadata = await asyncio.to_thread(prometheus.api, "metadata")
                for name in METRIC_NAMES:
                    info = SERIES[name]
                    family = info.name.removesuffix("_total")
                    kinds = {entry["type"] for entry in metadata.get(family, [])}
                    kinds |= {entry["type"] for entry in metadata.get(info.name, [])}
                    assert kinds == {info.type}, name

                # 2. Every dashboard query and alert expression reads the same.
                queries = [
                    query.expr
                    for file in sorted(DASHBOARDS)
                    for query in panel_queries(load_dashboard(file))
                ]
                rules = load_rules()
                alert_exprs = {r["expr"] for g in rules["groups"] for r in g["rules"]}
                queries += sorted(alert_exprs)
                for expr in queries:
                    if "rate(" in expr or "increase(" in expr:
                        continue  # compared through their counters above
                    await agree(expr, empty=expr in alert_exprs)
    finally:
        otel.uninstrument(registry)
        with contextlib.suppress(Exception):
            provider.shutdown()
        prometheus_path.bridge.uninstall()
        await registry.aclose()
