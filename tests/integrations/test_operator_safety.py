"""The operator tools as an attacker and a hurried operator would use them: ``inspect``
only reads (the keyspace is byte-for-byte the same after it), a wrong prefix, partition
count or scope is an error that says what is there, an operator's cancellation is counted
by the worker whose call it stops, a dead worker's call is reported as such, client-chosen
text cannot forge output, and labels cannot be confused with raw scopes. Real uvicorn
workers on a real Redis (and the cluster), the real CLI."""

from __future__ import annotations

import functools
import json
import uuid
from typing import Any

import anyio
import httpx
import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from mcp_cancellation import CancellationRegistry, ConfigurationError, MemoryStorage
from mcp_cancellation.admin import AdminApp, admin_app, cancel_requests, list_requests
from mcp_cancellation.scope import ScopeLabeler
from mcp_cancellation.telemetry.prometheus import PrometheusBridge

from ..support import async_wait_until, redis_url
from ._helpers import Calls, Serve, cli, workers_sharing

pytestmark = pytest.mark.e2e

HOSTILE_ID = "\x1b]0;owned\x07\x1b[2J\r\n99999.0s  ip:203.0.113.66  42  drop_db\u202e"


async def keyspace(url: str, prefix: str) -> dict[bytes, bytes]:
    """Every key of the table at *prefix* (its partitions too) with its ``DUMP``, but the
    workers' liveness (``P hb:<worker>`` and ``P pulse``, which their beaters rewrite
    every beat, whatever an operator does)."""
    cluster = url.startswith("redis+cluster://")
    if cluster:
        first = url.removeprefix("redis+cluster://").split(",")[0].split("/")[0]
        client: Any = aioredis.RedisCluster.from_url(f"redis://{first}/0")
    else:
        client = aioredis.Redis.from_url(url)
    try:
        found: dict[bytes, bytes] = {}
        async for key in client.scan_iter(match="{" + prefix + "*", count=1000):
            name = bytes(key)
            if name.endswith(b"}:pulse") or b"}:hb:" in name:
                continue
            found[name] = await client.dump(key)
        return found
    finally:
        await client.aclose()


@pytest.mark.redis
@pytest.mark.parametrize(
    "backend", ["redis", pytest.param("redis-cluster", marks=pytest.mark.cluster)]
)
async def test_inspect_only_reads_and_a_cli_cancel_is_counted_by_the_worker_it_stops(
    serve: Serve, http: httpx.AsyncClient, backend: str, request: pytest.FixtureRequest
) -> None:
    url = redis_url(backend, request)
    async with workers_sharing(url) as registries:
        prefix = registries[0].storage.prefix  # type: ignore[attr-defined]
        collectors = [CollectorRegistry() for _ in registries]
        bridges = [
            PrometheusBridge(r, collector_registry=c).install()
            for r, c in zip(registries, collectors, strict=True)
        ]
        try:
            idle, busy = (serve(json_response=True, registry=r, tools=["poll"]) for r in registries)
            async with anyio.create_task_group() as tg:
                calls = Calls(tg)
                calls.start(http, busy, "job")
                await busy.wait_started(1)
                # (Tracked in the table once it has run the storage's track delay.)
                await async_wait_until(functools.partial(_listed, registries[0], 1))
                before = await keyspace(url, prefix)
                assert before
                # Twice, and once with the server's script cache flushed: no write either way.
                for flush in (False, True):
                    if flush:
                        client = aioredis.Redis.from_url(url) if backend == "redis" else None
                        if client is not None:
                            await client.script_flush()
                            await client.aclose()
                    code, out, err = await cli("inspect", "--redis", url, "--prefix", prefix)
                    assert code == 0, err
                    assert "job" in out
                assert await keyspace(url, prefix) == before

                code, out, err = await cli(
                    *("cancel", "--redis", url, "--prefix", prefix),
                    *("--scope", "ip:127.0.0.1", "--id", "job", "--reason", "ops"),
                )
                assert code == 0, err
                assert "cancelled 1 request(s)" in out
                await calls.ended("job")
            assert [c["method"] for c in busy.cancellations] == ["operator"]
            assert idle.cancellations == []

            def operator_count(collector: CollectorRegistry) -> float:
                return (
                    collector.get_sample_value(
                        "mcp_cancellation_operator_cancelled_total", {"scope_kind": "ip"}
                    )
                    or 0.0
                )

            await async_wait_until(lambda: operator_count(collectors[1]) == 1, within=10)
            assert operator_count(collectors[0]) == 0
            # The CLI registered as no worker.
            workers = {k for k in await keyspace(url, prefix) if k.endswith(b"}:workers")}
            assert len(workers) == 1
        finally:
            for bridge in bridges:
                bridge.uninstall()


@pytest.mark.redis
async def test_inspect_of_an_empty_prefix_writes_nothing_and_says_so(
    redis_server: Any, request: pytest.FixtureRequest
) -> None:
    url = redis_url("redis", request)
    prefix = f"nothing-here-{uuid.uuid4().hex[:8]}"
    for command in ("inspect", "cancel"):
        extra = ("--scope", "ip:127.0.0.1", "--all") if command == "cancel" else ()
        code, out, err = await cli(command, "--redis", url, "--prefix", prefix, *extra)
        assert code == 2, out + err
        assert f"no table at prefix '{prefix}'" in err
        assert "Traceback" not in err
    assert await keyspace(url, prefix) == {}


@pytest.mark.redis
@pytest.mark.parametrize(
    "backend", ["redis", pytest.param("redis-cluster", marks=pytest.mark.cluster)]
)
async def test_a_wrong_prefix_or_partition_count_is_an_error_that_says_what_is_there(
    serve: Serve, http: httpx.AsyncClient, backend: str, request: pytest.FixtureRequest
) -> None:
    url = redis_url(backend, request)
    async with workers_sharing(url, count=1, partitions=2) as (registry,):
        prefix = registry.storage.prefix  # type: ignore[attr-defined]
        worker = serve(json_response=True, registry=registry, tools=["poll"])
        async with anyio.create_task_group() as tg:
            calls = Calls(tg)
            for n in range(4):  # scopes of both partitions, from two addresses
                calls.start(http, worker, f"job-{n}")
            await worker.wait_started(4)
            await async_wait_until(functools.partial(_listed, registry, 4))  # (tracked)
            before = await keyspace(url, prefix)

            for partitions in ("1", "3"):
                code, out, err = await cli(
                    "inspect", "--redis", url, "--prefix", prefix, "--partitions", partitions
                )
                assert code == 2, out + err
                assert "--partitions 2" in err
                assert "job-" not in out
            code, out, err = await cli("inspect", "--redis", url, "--prefix", prefix + "x")
            assert code == 2, out + err
            assert f"no table at prefix '{prefix}x'" in err
            if backend == "redis":  # (the search of other prefixes reads one server)
                assert repr(prefix) in err
            code, out, err = await cli(
                "inspect", "--redis", url, "--prefix", prefix, "--partitions", "2", "--json"
            )
            assert code == 0, err
            assert len(json.loads(out)["requests"]) == 4
            # A scope without its kind: a hint, not "nothing cancelled".
            code, out, err = await cli(
                *("cancel", "--redis", url, "--prefix", prefix, "--partitions", "2"),
                *("--scope", "127.0.0.1", "--all"),
            )
            assert code == 2, out + err
            assert "'ip:127.0.0.1'" in err
            assert await keyspace(url, prefix) == before
            code, _, err = await cli(
                *("cancel", "--redis", url, "--prefix", prefix, "--partitions", "2"),
                *("--scope", "ip:127.0.0.1", "--all"),
            )
            assert code == 0, err
            await calls.ended(*(f"job-{n}" for n in range(4)))


@pytest.mark.redis
async def test_a_dead_worker_s_call_is_reported_not_cancelled(
    redis_server: Any, request: pytest.FixtureRequest
) -> None:
    url = redis_url("redis", request)
    # (A heartbeat beaten every 150 s: once its first beat is done, the key deleted below
    # stays gone for the test, as a SIGKILLed worker's does.)
    async with workers_sharing(url, count=1, heartbeat_ttl=600) as (registry,):
        storage: Any = registry.storage
        async with registry.request("orphan", "ip:192.0.2.9", tool="poll"):
            # Tracked in Redis (once it has run the track delay), with a heartbeat.
            await async_wait_until(functools.partial(_listed, registry, 1))
            await async_wait_until(lambda: storage.heartbeats >= 1)
            client = aioredis.Redis.from_url(url)
            try:  # the worker's heartbeat lapses, as a SIGKILLed worker's does
                await client.delete(storage.key("hb:", storage.worker_id))
            finally:
                await client.aclose()
            code, out, err = await cli("inspect", "--redis", url, "--prefix", storage.prefix)
            assert code == 0, err
            assert "(gone)" in out
            code, out, err = await cli(
                *("cancel", "--redis", url, "--prefix", storage.prefix),
                *("--scope", "ip:192.0.2.9", "--id", "orphan", "--json"),
            )
            assert code == 0, err
            document = json.loads(out)
            assert document["cancelled"] == []
            assert [r["id"] for r in document["worker_gone"]] == ["orphan"]
            code, out, err = await cli(
                *("cancel", "--redis", url, "--prefix", storage.prefix),
                *("--scope", "ip:192.0.2.9", "--id", "orphan"),
            )
            assert "nothing cancelled" in out
            assert "worker that is gone" in out


@pytest.mark.redis
async def test_client_chosen_text_is_escaped_in_every_line_an_operator_reads(
    serve: Serve,
    http: httpx.AsyncClient,
    request: pytest.FixtureRequest,
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = redis_url("redis", request)
    async with workers_sharing(url, count=1) as (registry,):
        prefix = registry.storage.prefix  # type: ignore[attr-defined]
        worker = serve(json_response=True, registry=registry, tools=["poll"])
        async with anyio.create_task_group() as tg:
            calls = Calls(tg)
            calls.start(http, worker, HOSTILE_ID)
            await worker.wait_started(1)
            code, out, err = await cli("inspect", "--redis", url, "--prefix", prefix)
            assert code == 0, err
            _, out_json, _ = await cli("inspect", "--redis", url, "--prefix", prefix, "--json")
            assert json.loads(out_json)["requests"][0]["id"] == HOSTILE_ID
            reason = "bye\r\nFAKE LOG LINE\x1b[31m"
            with caplog.at_level("INFO", logger="mcp_cancellation.admin"):
                cancelled = await cancel_requests(
                    registry, "ip:127.0.0.1", request_id=HOSTILE_ID, reason=reason
                )
            assert [v.id for v in cancelled] == [HOSTILE_ID]
            await calls.ended(HOSTILE_ID)
        for text in (out, err):
            assert not any(c in text for c in "\x1b\x07\r\u202e")
            assert "drop_db" in text or text == err
        assert len(out.strip().splitlines()) == 2  # the head and one row: nothing forged
        (record,) = [r for r in caplog.records if r.name == "mcp_cancellation.admin"]
        line = record.getMessage()
        assert "\n" not in line
        assert "\r" not in line
        assert "\x1b" not in line


async def test_a_label_never_selects_another_caller_s_raw_scope() -> None:
    registry = CancellationRegistry(MemoryStorage(), janitor_interval=None)
    labeler = ScopeLabeler()
    victim = "session:victim-secret-session-id"
    label = labeler(victim)  # session:<hash>, what the dashboards show
    mimic = label  # a caller whose raw scope is the victim's label
    shortened = "principal:" + "x" * 200
    forged = labeler(shortened)  # principal:xxx...~<hash>
    try:
        async with (
            registry.request("a", victim) as victim_token,
            registry.request("a", mimic) as mimic_token,
            registry.request("b", shortened) as long_token,
            registry.request("b", forged) as forged_token,
        ):
            assert labeler(mimic) != label
            assert labeler(forged) != forged  # a raw scope shaped like a label is relabelled
            listed = await list_requests(registry, scope=label)
            assert [(v.scope, v.id) for v in listed] == [(label, "a")]
            await cancel_requests(registry, label, every=True)
            assert victim_token.cancelled
            assert not mimic_token.cancelled
            await cancel_requests(registry, forged, every=True)
            assert long_token.cancelled
            assert not forged_token.cancelled
    finally:
        await registry.aclose()


def test_an_empty_token_is_refused_by_every_constructor() -> None:
    registry = CancellationRegistry(MemoryStorage(), janitor_interval=None)
    for token in ("", "   "):
        with pytest.raises(ConfigurationError):
            AdminApp(registry, token)
        with pytest.raises(ConfigurationError):
            admin_app(registry, token=token)


async def _listed(registry: CancellationRegistry, n: int) -> bool:
    """Whether the table lists *n* calls in flight (each tracked in Redis)."""
    return len(await registry.requests()) >= n
