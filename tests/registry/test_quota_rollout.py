"""Rolling out a quota: shadow mode (count what would be refused, refuse nothing),
per-scope overrides (honoured by the quota, and eviction ranks by rows whatever a scope's
quota), and the count of scopes near their quota, on every backend."""

from __future__ import annotations

import pytest

from mcp_cancellation import CancellationLimitReached, CancellationRegistry, ConfigurationError
from mcp_cancellation.signals import cancellation_evicted, cancellation_rejected, request_cancelled
from mcp_cancellation.telemetry._catalogue import near_quota_rows

from ..support import MakeRegistry, one_table
from ._util import receiving, rows


async def _fill(registry: CancellationRegistry, scope: str, count: int, start: int = 0) -> None:
    for request_id in range(start, start + count):
        await registry.cancel(request_id, scope=scope)


# -- shadow mode ------------------------------------------------------------------------


async def test_shadow_mode_counts_every_would_be_rejection_and_refuses_none(
    make_registry: MakeRegistry,
) -> None:
    registry = make_registry(max_rows_per_scope=2, quota_mode="shadow")
    assert registry.quota_mode == "shadow"
    with receiving(cancellation_rejected) as rejected, receiving(request_cancelled) as recorded:
        await _fill(registry, "ip:192.0.2.1", 5)
        await _fill(registry, "ip:192.0.2.2", 2)
        await registry.cancel(0, "again", "ip:192.0.2.1")  # an update is never over quota
    assert await rows(registry) == {"ip:192.0.2.1": 5, "ip:192.0.2.2": 2}
    assert len(recorded.kwargs) == 8
    assert rejected.kwargs == [
        {"scope": "ip:192.0.2.1", "request_id": str(i), "reason": "quota", "mode": "shadow"}
        for i in (2, 3, 4)
    ]


@one_table
async def test_shadow_mode_still_refuses_invalid_ids_and_keeps_the_cap(
    make_registry: MakeRegistry,
) -> None:
    registry = make_registry(max_rows=20, max_rows_per_scope=2, quota_mode="shadow")
    with receiving(cancellation_rejected) as rejected, pytest.raises(Exception, match="id"):
        await registry.cancel(1.5, scope="s")
    assert rejected.kwargs[0]["mode"] == "enforce"
    with receiving(cancellation_evicted) as evicted:
        await _fill(registry, "s", 21)
    assert sum(k["count"] for k in evicted.kwargs) == 1  # the cap still evicts
    assert await rows(registry) == {"s": 20}


def test_quota_mode_is_validated_and_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ConfigurationError, match="quota_mode"):
        CancellationRegistry(quota_mode="strict", janitor_interval=None)  # type: ignore[arg-type]
    monkeypatch.setenv("MCP_CANCELLATION_QUOTA_MODE", "shadow")
    assert CancellationRegistry(janitor_interval=None).limits.shadow_quota
    monkeypatch.setenv("MCP_CANCELLATION_QUOTA_MODE", "loose")
    with pytest.raises(ConfigurationError, match="loose"):
        CancellationRegistry(janitor_interval=None)


# -- overrides --------------------------------------------------------------------------


async def test_a_mapping_of_overrides_raises_and_lowers_quotas(
    make_registry: MakeRegistry,
) -> None:
    overrides = {"principal:batch": 6, "ip:203.0.113.9": 1}
    registry = make_registry(max_rows_per_scope=3, quota_overrides=overrides)
    assert registry.quota_for("principal:batch") == 6
    assert registry.quota_for("ip:203.0.113.9") == 1
    assert registry.quota_for("ip:192.0.2.1") == 3
    await _fill(registry, "principal:batch", 6)
    await _fill(registry, "ip:203.0.113.9", 1)
    await _fill(registry, "ip:192.0.2.1", 3)
    for scope, limit in (("principal:batch", 6), ("ip:203.0.113.9", 1), ("ip:192.0.2.1", 3)):
        with pytest.raises(CancellationLimitReached) as info:
            await registry.cancel(99, scope=scope)
        assert info.value.limit == limit
    assert await rows(registry) == {"principal:batch": 6, "ip:203.0.113.9": 1, "ip:192.0.2.1": 3}


async def test_a_callable_override_and_shadow_mode_together(make_registry: MakeRegistry) -> None:
    def quota(scope: str) -> int | None:
        return 4 if scope.startswith("principal:") else None  # None: the default

    registry = make_registry(max_rows_per_scope=2, quota_overrides=quota, quota_mode="shadow")
    with receiving(cancellation_rejected) as rejected:
        await _fill(registry, "principal:carol", 5)
        await _fill(registry, "ip:192.0.2.1", 3)
    assert [(k["scope"], k["request_id"]) for k in rejected.kwargs] == [
        ("principal:carol", "4"),
        ("ip:192.0.2.1", "2"),
    ]
    assert await rows(registry) == {"principal:carol": 5, "ip:192.0.2.1": 3}


@one_table
async def test_eviction_ranks_by_rows_whatever_the_quota(make_registry: MakeRegistry) -> None:
    registry = make_registry(
        max_rows=20, max_rows_per_scope=2, quota_overrides={"principal:batch": 15}
    )
    await _fill(registry, "principal:batch", 15)
    for n in range(2):
        await _fill(registry, f"ip:192.0.2.{n}", 2)
    await _fill(registry, "ip:192.0.2.9", 1)
    with receiving(cancellation_evicted) as evicted:
        await registry.cancel(0, scope="ip:192.0.2.10")  # the 21st row: a batch of 1
    assert evicted.kwargs == [{"scope": "principal:batch", "count": 1}]
    assert (await rows(registry))["principal:batch"] == 14


def test_bad_overrides_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="principal:x"):
        CancellationRegistry(quota_overrides={"principal:x": 0}, janitor_interval=None)
    with pytest.raises(ConfigurationError, match="mapping or a callable"):
        CancellationRegistry(quota_overrides=[1, 2], janitor_interval=None)  # type: ignore[arg-type]


async def test_a_failing_override_callable_falls_back_to_the_default(
    make_registry: MakeRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(scope: str) -> int | None:
        raise RuntimeError("lookup failed")

    registry = make_registry(max_rows_per_scope=2, quota_overrides=broken)
    await _fill(registry, "s", 2)
    with pytest.raises(CancellationLimitReached):
        await registry.cancel(2, scope="s")
    assert "lookup failed" in caplog.text


# -- near the quota ---------------------------------------------------------------------


async def test_scopes_near_their_quota_are_counted_from_the_index(
    make_registry: MakeRegistry,
) -> None:
    registry = make_registry(max_rows_per_scope=5)
    for scope, count in (("a", 5), ("b", 4), ("c", 3), ("d", 1), ("e", 4)):
        await _fill(registry, scope, count)
    threshold = near_quota_rows(5)
    assert threshold == 4
    summary = await registry.storage.summary(2, threshold)
    assert summary.at_least == 3  # a, b, e: at least 80% of 5
    assert (await registry.storage.summary(2, 1)).at_least == 5
    assert (await registry.storage.summary(2, 6)).at_least == 0
    assert (await registry.storage.summary(2)).at_least == 0
