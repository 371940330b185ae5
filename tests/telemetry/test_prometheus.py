"""The Prometheus bridge, scraped over HTTP from a real uvicorn serving ``metrics_app``."""

from __future__ import annotations

import asyncio
import gc
import hashlib
import hmac
import logging
import re
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from mcp_cancellation import (
    CancellationLimitReached,
    CancellationRegistry,
    ConfigurationError,
    InvalidRequestId,
    signals,
)
from mcp_cancellation.scope import DEFAULT_HASH_KEY, HASH_KEY_ENV, SCOPE_KINDS
from mcp_cancellation.telemetry.prometheus import METRIC_NAMES, PrometheusBridge, metrics_app
from mcp_cancellation.telemetry.prometheus._catalogue import SERIES

from ..registry._util import receiving
from ..support import MakeRegistry, UvicornThread, env
from ._util import SESSION_ID, samples, series, value

P = "mcp_cancellation_"
SESSION_LABEL_RE = re.compile(r"^session:[0-9a-f]{12}$")


def session_label(session_id: str, key: bytes = DEFAULT_HASH_KEY) -> str:
    digest = hmac.new(key, session_id.encode(), hashlib.sha256).hexdigest()
    return "session:" + digest[:12]


async def scrape(url: str) -> str:
    async with httpx.AsyncClient() as client:
        response = await client.get(url + "/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return response.text


async def test_scrape_after_real_cancellations_sample_by_sample(
    make_registry: MakeRegistry,
) -> None:
    registry: CancellationRegistry = make_registry(max_rows=12, max_rows_per_scope=3)
    app = metrics_app(registry, top_k=3)
    ST = registry.storage.identity
    session = f"session:{SESSION_ID}"
    for request_id in (1, 2, 3):  # first, so that its oldest row goes first on eviction
        await registry.cancel(request_id, "stop", "ip:192.0.2.1")
    with pytest.raises(CancellationLimitReached):
        await registry.cancel(4, None, "ip:192.0.2.1")
    with pytest.raises(InvalidRequestId):
        await registry.cancel(True, None, "ip:192.0.2.2")
    for request_id in (1, 2, 3):
        await registry.cancel(request_id, None, session)
    await registry.cancel(1, None, "principal:alice")
    await registry.cancel(2, None, "principal:alice")
    await registry.cancel(1, None)  # global
    await registry.cancel(1, None, "library-scope")  # other
    await registry.cancel(2, None, "ip:198.51.100.7")
    await registry.cancel(3, None, "ip:198.51.100.7")
    # 12 rows = max_rows: the next insert evicts one row from the oldest largest scope.
    await registry.cancel(1, None, "ip:203.0.113.9")

    with UvicornThread(app) as server:
        async with registry.request(7, "principal:alice"):
            text = await scrape(server.url)
        parsed = samples(text)

        assert SESSION_ID not in text
        for kind, n in {"ip": 6, "session": 3, "principal": 2, "global": 1, "other": 1}.items():
            assert value(parsed, P + "cancelled_total", scope_kind=kind) == n
        for kind in SCOPE_KINDS:
            for reason in ("quota", "invalid_request_id"):
                expected = 1 if kind == "ip" else 0
                assert (
                    value(
                        parsed, P + "rejected_total", scope_kind=kind, reason=reason, mode="enforce"
                    )
                    == expected
                )
            assert value(parsed, P + "evicted_total", scope_kind=kind) == (kind == "ip")
        assert value(parsed, P + "cleanup_removed_total", table="cancellations") == 0
        assert value(parsed, P + "cleanup_removed_total", table="in_flight") == 0
        for kind, n in {"ip": 5, "session": 3, "principal": 2, "global": 1, "other": 1}.items():
            assert value(parsed, P + "rows", storage=ST, scope_kind=kind) == n
        for kind in SCOPE_KINDS:
            assert value(parsed, P + "in_flight", storage=ST, scope_kind=kind) == (
                kind == "principal"
            )
        assert value(parsed, P + "max_rows", storage=ST) == 12
        assert value(parsed, P + "max_rows_per_scope", storage=ST) == 3
        # The top 3 in eviction order: equal sizes go oldest row first (alice's before
        # 198.51.100.7's), as the cap would evict them.
        assert series(parsed, P + "scope_rows") == {
            frozenset({("storage", ST), ("scope", session_label(SESSION_ID))}): 3,
            frozenset({("storage", ST), ("scope", "ip:192.0.2.1")}): 2,
            frozenset({("storage", ST), ("scope", "principal:alice")}): 2,
        }
        assert series(parsed, P + "scope_rejections") == {
            frozenset({("scope", "ip:192.0.2.1"), ("reason", "quota")}): 1,
            frozenset({("scope", "ip:192.0.2.2"), ("reason", "invalid_request_id")}): 1,
        }

        # A request whose task ended without untracking, then a cleanup of everything.
        await asyncio.create_task(registry.track(9, "ip:192.0.2.50"))
        result = await registry.cleanup(ttl=1e-9)
        assert result == (12, 1)
        parsed = samples(await scrape(server.url))
    assert value(parsed, P + "cleanup_removed_total", table="cancellations") == 12
    assert value(parsed, P + "cleanup_removed_total", table="in_flight") == 1
    for kind in SCOPE_KINDS:
        assert value(parsed, P + "rows", storage=ST, scope_kind=kind) == 0
        assert value(parsed, P + "in_flight", storage=ST, scope_kind=kind) == 0
    assert series(parsed, P + "scope_rows") == {}
    assert value(parsed, P + "cancelled_total", scope_kind="ip") == 6  # counters stay


async def test_flood_from_100k_addresses_keeps_series_bounded(make_registry: MakeRegistry) -> None:
    registry: CancellationRegistry = make_registry(max_rows=1_000, max_rows_per_scope=1)
    top_k = 20
    app = metrics_app(registry, top_k=top_k)
    ST = registry.storage.identity
    offender = "ip:203.0.113.66"
    accepted = rejected = offender_rejected = 0
    for i in range(100_000):
        scope = f"ip:10.{i >> 16}.{(i >> 8) & 255}.{i & 255}"
        await registry.cancel(1, None, scope)
        accepted += 1
        try:
            await registry.cancel(2, None, scope)
            accepted += 1
        except CancellationLimitReached:
            rejected += 1
        if i % 20 == 0:
            try:
                await registry.cancel(i, None, offender)
                accepted += 1
            except CancellationLimitReached:
                rejected += 1
                offender_rejected += 1
    assert rejected > 100_000
    assert offender_rejected > 1_000

    with UvicornThread(app) as server:
        text = await scrape(server.url)
    parsed = samples(text)
    # Fixed bound: 63 counter series (+63 _created; 24 of them tasks': 5 scope kinds x 4
    # rejection reasons, and 4 more), 5+5 kind gauges, 2 limits, storage_up,
    # tasks_running, 2*K scopes.
    assert len(parsed) <= 2 * 63 + 10 + 2 + 1 + 1 + 2 * top_k
    assert len(series(parsed, P + "scope_rows")) <= top_k
    rejections = series(parsed, P + "scope_rejections")
    # Only the offender is certainly among the top K: no flood address is exported.
    assert set(rejections) == {frozenset({("scope", offender), ("reason", "quota")})}
    # Space-Saving never underestimates, and a persistent offender is always kept.
    offender_series = frozenset({("scope", offender), ("reason", "quota")})
    assert rejections[offender_series] >= offender_rejected
    quota = {"scope_kind": "ip", "reason": "quota", "mode": "enforce"}
    assert value(parsed, P + "rejected_total", **quota) == rejected
    assert value(parsed, P + "cancelled_total", scope_kind="ip") == accepted
    rows = value(parsed, P + "rows", storage=ST, scope_kind="ip")
    assert 950 < rows <= 1_000  # the cap evicts in batches of max_rows // 20
    assert value(parsed, P + "evicted_total", scope_kind="ip") == accepted - rows


async def test_evictions_count_rows_not_scopes(make_registry: MakeRegistry) -> None:
    """One evicted scope can lose several rows at once: evicted_total adds them all, by
    the scope's kind (a flood of one-row scopes, one row each)."""
    registry: CancellationRegistry = make_registry(max_rows=80, max_rows_per_scope=None)
    bridge = PrometheusBridge(registry, collector_registry=CollectorRegistry()).install()
    try:
        for request_id in range(60):
            await registry.cancel(request_id, None, "principal:big")
        for i in range(20):
            await registry.cancel(1, None, f"ip:10.9.0.{i}")
        await registry.cancel(1, None, "ip:203.0.113.1")  # at the cap: a batch of 4
        for i in range(56):  # 56 more single rows: the big scope goes first, 4 at a time
            await registry.cancel(1, None, f"session:flood-{i}")
        body, _ = await bridge.render()
        parsed = samples(body.decode())
    finally:
        bridge.uninstall()
    assert value(parsed, P + "evicted_total", scope_kind="principal") == 60
    assert value(parsed, P + "evicted_total", scope_kind="ip") == 0
    assert value(parsed, P + "evicted_total", scope_kind="session") == 0
    assert (await registry.stats()).rows.get("principal:big") is None


#: One-row scopes of every kind, in the order they are filled (``global`` is one scope).
_KINDS_CYCLE = ("ip:10.8.{}.1", "session:s-{}", "principal:p-{}", "tenant-{}")


async def test_an_eviction_batch_counts_every_kind_once(make_registry: MakeRegistry) -> None:
    """A flood's batch of one-row scopes of every kind: evicted_total gains each kind's
    rows from the one batch signal, and the bridge listens to no per-scope signal (what a
    flood's thousands of scopes would cost it)."""
    registry: CancellationRegistry = make_registry(max_rows=400, max_rows_per_scope=None)
    bridge = PrometheusBridge(registry, collector_registry=CollectorRegistry()).install()
    try:
        assert not signals.cancellation_evicted.receivers
        await registry.cancel(1, None, "global")  # the oldest row: the first evicted
        for i in range(399):
            await registry.cancel(1, None, _KINDS_CYCLE[i % 4].format(i))
        with receiving(signals.cancellation_evicted_batch) as batches:
            await registry.cancel(1, None, "ip:203.0.113.1")  # at the cap: 20 scopes go
        body, _ = await bridge.render()
        parsed = samples(body.decode())
    finally:
        bridge.uninstall()
    ((_, kwargs),) = batches.calls
    assert kwargs["rows"] == 20
    # global, then the 19 oldest of the cycle: 5 ip, 5 session, 5 principal, 4 other.
    expected = {"global": 1, "ip": 5, "session": 5, "principal": 5, "other": 4}
    for kind, rows in expected.items():
        assert value(parsed, P + "evicted_total", scope_kind=kind) == rows, kind


async def test_session_scopes_are_hashed_everywhere(make_registry: MakeRegistry) -> None:
    registry: CancellationRegistry = make_registry(max_rows_per_scope=1)
    app = metrics_app(registry)
    sessions = [f"{SESSION_ID}-{n}" for n in range(30)]
    for n, session_id in enumerate(sessions):
        await registry.cancel(1, None, f"session:{session_id}")
        for _ in range(n + 1):  # distinct counts: the top 20 rejected are certain
            with pytest.raises(CancellationLimitReached):
                await registry.cancel(2, None, f"session:{session_id}")
    with UvicornThread(app) as server:
        text = await scrape(server.url)
    assert SESSION_ID not in text
    parsed = samples(text)
    for name in (P + "scope_rows", P + "scope_rejections"):
        labels = {dict(k)["scope"] for k in series(parsed, name)}
        assert len(labels) == 20
        assert all(SESSION_LABEL_RE.match(label) for label in labels)
        assert labels <= {session_label(s) for s in sessions}


def test_session_label_key_is_configurable() -> None:
    registry = CancellationRegistry(janitor_interval=None)
    default = PrometheusBridge(registry, collector_registry=None)
    keyed = PrometheusBridge(registry, collector_registry=None, hash_key="k1")
    with env(**{HASH_KEY_ENV: "k1"}):
        from_env = PrometheusBridge(registry, collector_registry=None)
    scope = f"session:{SESSION_ID}"
    assert default.labeler(scope) == session_label(SESSION_ID)
    assert keyed.labeler(scope) == session_label(SESSION_ID, b"k1") == from_env.labeler(scope)
    assert keyed.labeler(scope) != default.labeler(scope)
    long_scope = "principal:" + "x" * 300
    assert len(default.labeler(long_scope)) == 128
    assert default.labeler(long_scope) != default.labeler(long_scope + "y")
    assert default.labeler("ip:192.0.2.1") == "ip:192.0.2.1"


async def test_bridges_filter_by_sender(make_registry: MakeRegistry) -> None:
    first: CancellationRegistry = make_registry()
    second: CancellationRegistry = make_registry()
    one, two = CollectorRegistry(), CollectorRegistry()
    PrometheusBridge(first, collector_registry=one).install()
    PrometheusBridge(second, collector_registry=two).install()
    await first.cancel(1, None, "ip:192.0.2.1")
    await first.cancel(2, None, "ip:192.0.2.1")
    await second.cancel(1, None, "principal:bob")
    a = samples(generate_latest(one).decode())
    b = samples(generate_latest(two).decode())
    ST, SB = first.storage.identity, second.storage.identity
    assert ST != SB  # two tables in one process, two storage label values
    assert value(a, P + "cancelled_total", scope_kind="ip") == 2
    assert value(a, P + "cancelled_total", scope_kind="principal") == 0
    assert value(b, P + "cancelled_total", scope_kind="ip") == 0
    assert value(b, P + "cancelled_total", scope_kind="principal") == 1
    assert value(a, P + "rows", storage=ST, scope_kind="ip") == 2
    assert value(b, P + "rows", storage=SB, scope_kind="ip") == 0


async def test_install_and_uninstall_are_idempotent(
    make_registry: MakeRegistry, collector_registry: CollectorRegistry
) -> None:
    registry: CancellationRegistry = make_registry()
    before = len(signals.request_cancelled.receivers)
    bridge = PrometheusBridge(registry, collector_registry=collector_registry)
    assert bridge.install() is bridge.install() is bridge
    await registry.cancel(1)
    parsed = samples(generate_latest(collector_registry).decode())
    assert value(parsed, P + "cancelled_total", scope_kind="global") == 1  # counted once

    other = PrometheusBridge(make_registry(), collector_registry=collector_registry)
    with pytest.raises(ConfigurationError):
        other.install()  # one bridge per CollectorRegistry
    assert not other.installed

    bridge.uninstall()
    bridge.uninstall()
    assert len(signals.request_cancelled.receivers) == before
    assert generate_latest(collector_registry) == b""
    await registry.cancel(2)  # nothing listens any more
    bridge.install()  # and it can come back
    await registry.cancel(3)
    parsed = samples(generate_latest(collector_registry).decode())
    assert value(parsed, P + "cancelled_total", scope_kind="global") == 1
    bridge.uninstall()


async def test_metrics_app_reuses_its_bridge(make_registry: MakeRegistry) -> None:
    registry: CancellationRegistry = make_registry()
    first, second = metrics_app(registry), metrics_app(registry)
    assert first.bridge is second.bridge
    with pytest.raises(ConfigurationError):
        metrics_app(registry, top_k=5)
    with pytest.raises(ConfigurationError):
        metrics_app(registry, hash_key="another key")
    await registry.cancel(1)
    body, _ = await first.bridge.render()
    assert value(samples(body.decode()), P + "cancelled_total", scope_kind="global") == 1
    first.bridge.uninstall()


def test_bridge_goes_away_with_its_registry() -> None:
    gc.collect()  # registries of earlier tests
    before = len(signals.request_cancelled.receivers)
    registry = CancellationRegistry(janitor_interval=None)
    app = metrics_app(registry)
    assert len(signals.request_cancelled.receivers) == before + 1
    del registry, app
    gc.collect()
    assert len(signals.request_cancelled.receivers) == before


async def test_exposition_matches_metric_names(make_registry: MakeRegistry) -> None:
    registry: CancellationRegistry = make_registry(max_rows=None)
    app = metrics_app(registry)
    ST = registry.storage.identity
    await registry.cancel(1, None, "ip:192.0.2.1")
    with pytest.raises(InvalidRequestId):
        await registry.cancel(1.5, None, "ip:192.0.2.1")
    call = {"mcp.method.name": "tools/call"}  # as the middleware names a call
    async with registry.request(2, "ip:192.0.2.1", labels=call) as token:  # cancelled
        await registry.cancel_in_flight(2, None, "ip:192.0.2.1")
        assert token.cancelled
    # A task, as TasksExtension reports one: created, then ended.
    signals.task_created.send(registry, task_id="t", scope="ip:192.0.2.1", tool=None)
    signals.task_ended.send(
        registry, task_id="t", scope="ip:192.0.2.1", tool=None, status="failed", seconds=3.0
    )
    body, _ = await app.bridge.render()
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    exported = set()
    operations: set[str] = set()
    operation = {"mcp_method_name", "gen_ai_tool_name", "error_type", "mcp_protocol_version"}
    for family in families.values():
        for sample in family.samples:
            if sample.name.startswith("mcp_server_operation_duration_seconds") and not (
                sample.name.endswith("_created")
            ):
                # The standard MCP metric (outside the catalogue): the request above, once.
                assert family.type == "histogram"
                labels = set(sample.labels) - {"le"}
                assert labels == operation | {"network_transport"}
                operations.add(sample.labels["mcp_method_name"])
                continue
            if not sample.name.endswith("_created"):
                exported.add(sample.name)
                info = SERIES[sample.name]
                assert family.type == info.type
                expected = set(info.labels) | ({"le"} if sample.name.endswith("_bucket") else set())
                assert set(sample.labels) == expected
    assert exported == METRIC_NAMES
    assert operations == {"tools/call"}
    parsed = samples(body.decode())
    assert value(parsed, P + "max_rows", storage=ST) == float("inf")  # disabled limits read +Inf


async def test_head_and_other_methods(make_registry: MakeRegistry) -> None:
    app = metrics_app(make_registry())
    with UvicornThread(app) as server:
        async with httpx.AsyncClient() as client:
            head = await client.head(server.url + "/metrics")
            post = await client.post(server.url + "/metrics")
            openmetrics = await client.get(
                server.url + "/", headers={"accept": "application/openmetrics-text"}
            )
    assert head.status_code == 200
    assert head.content == b""
    assert post.status_code == 405
    assert post.headers["allow"] == "GET, HEAD"
    assert openmetrics.headers["content-type"].startswith("application/openmetrics-text")
    assert openmetrics.text.rstrip().endswith("# EOF")


@pytest.mark.redis
async def test_gauges_with_redis_storage_come_from_awaited_stats(
    redis_server: Any, collector_registry: CollectorRegistry
) -> None:
    from mcp_cancellation.storage.redis import RedisStorage

    storage = RedisStorage.from_url(redis_server.url, prefix="telemetry-gauges")
    registry = CancellationRegistry(storage, janitor_interval=None)
    try:
        app = metrics_app(registry, collector_registry=collector_registry)
        ST = f"redis://127.0.0.1:{redis_server.port}/0?prefix=telemetry-gauges"
        assert storage.identity == ST
        await registry.cancel(1, None, "ip:192.0.2.1")
        await registry.cancel(2, None, f"session:{SESSION_ID}")
        # collect() cannot await Redis: before any snapshot there are no row gauges.
        plain = samples(generate_latest(collector_registry).decode())
        assert series(plain, P + "rows") == {}
        assert value(plain, P + "cancelled_total", scope_kind="ip") == 1
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            text = (await client.get("/metrics")).text
        parsed = samples(text)
        assert SESSION_ID not in text
        assert value(parsed, P + "rows", storage=ST, scope_kind="ip") == 1
        assert value(parsed, P + "rows", storage=ST, scope_kind="session") == 1
        assert series(parsed, P + "scope_rows") == {
            frozenset({("storage", ST), ("scope", "ip:192.0.2.1")}): 1,
            frozenset({("storage", ST), ("scope", session_label(SESSION_ID))}): 1,
        }
        # Other exposition paths on this loop use the last awaited snapshot ...
        await registry.cancel(3, None, "ip:192.0.2.1")
        await app.bridge.refresh()
        plain = samples(generate_latest(collector_registry).decode())
        assert value(plain, P + "rows", storage=ST, scope_kind="ip") == 2
        # ... and from another thread (prometheus_client's start_http_server) they read
        # the table itself, on the storage's loop.
        await registry.cancel(4, None, "ip:192.0.2.1")
        text = await asyncio.to_thread(lambda: generate_latest(collector_registry).decode())
        assert value(samples(text), P + "rows", storage=ST, scope_kind="ip") == 3
        app.bridge.uninstall()
    finally:
        await registry.aclose()


def test_multiprocess_dir_must_exist(tmp_path: Any) -> None:
    registry = CancellationRegistry(janitor_interval=None)
    with pytest.raises(ConfigurationError, match="not a directory"):
        PrometheusBridge(
            registry, collector_registry=None, multiprocess_dir=str(tmp_path / "missing")
        )


@pytest.mark.redis
async def test_scrape_survives_a_redis_outage(caplog: pytest.LogCaptureFixture) -> None:
    from mcp_cancellation.storage.redis import RedisStorage

    from ..support import RedisServer

    caplog.set_level(logging.INFO, "mcp_cancellation.storage")
    with RedisServer() as redis:
        registry = CancellationRegistry(
            RedisStorage.from_url(redis.url, prefix="telemetry-outage"), janitor_interval=None
        )
        try:
            app = metrics_app(registry)
            ST = registry.storage.identity
            await registry.cancel(1, None, "ip:192.0.2.1")
            body, _ = await app.bridge.render()
            parsed = samples(body.decode())
            assert value(parsed, P + "rows", storage=ST, scope_kind="ip") == 1
            assert value(parsed, P + "storage_up", storage=ST) == 1
            errors = P + "storage_errors_total"
            assert value(parsed, errors, storage=ST, operation="stats") == 0
            redis.stop()
            body, _ = await app.bridge.render()
            parsed = samples(body.decode())
            assert value(parsed, P + "cancelled_total", scope_kind="ip") == 1
            assert value(parsed, P + "max_rows", storage=ST) == 10_000
            assert series(parsed, P + "rows") == {}  # left out, not stale
            assert value(parsed, P + "storage_up", storage=ST) == 0
            assert value(parsed, errors, storage=ST, operation="stats") == 1
            assert "Redis storage unavailable" in caplog.text
            # It comes back by itself: no restart, no reinstall.
            redis.start()
            body, _ = await app.bridge.render()
            parsed = samples(body.decode())
            assert value(parsed, P + "storage_up", storage=ST) == 1
            assert value(parsed, P + "rows", storage=ST, scope_kind="ip") == 0  # data was lost
            assert value(parsed, errors, storage=ST, operation="stats") == 1
            assert "Redis storage answers again" in caplog.text
            app.bridge.uninstall()
        finally:
            await registry.aclose()


def test_cancelled_total_counts_every_cancellation_from_many_threads() -> None:
    """The cancellation counter (a lock-guarded tally, not a prometheus_client child)
    loses no increment when threads with their own loops cancel at once, and exposes
    ``_total`` and ``_created`` for every scope kind from the start."""
    import threading

    registry = CancellationRegistry(janitor_interval=None, max_rows=None, max_rows_per_scope=None)
    app = metrics_app(registry)
    threads, per_thread = 6, 300
    start = threading.Barrier(threads)

    def work(n: int) -> None:
        async def cancels() -> None:
            start.wait()  # every thread inside its loop before any cancels
            for i in range(per_thread):
                await registry.cancel(i, None, f"ip:192.0.2.{n}")

        asyncio.run(cancels())

    workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
        assert not worker.is_alive()
    assert app.bridge.collector_registry is not None
    text = generate_latest(app.bridge.collector_registry).decode()
    parsed = samples(text)
    assert value(parsed, P + "cancelled_total", scope_kind="ip") == threads * per_thread
    for kind in SCOPE_KINDS:
        created = value(parsed, P + "cancelled_created", scope_kind=kind)
        assert created > 0
        if kind != "ip":
            assert value(parsed, P + "cancelled_total", scope_kind=kind) == 0
    app.bridge.uninstall()
