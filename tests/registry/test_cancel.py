"""Recording, reading and clearing cancellations; scopes keep callers apart."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken

from mcp_cancellation import (
    CancellationRegistry,
    RequestCancelled,
    cancelled,
    current_token,
    raise_if_cancelled,
    scope_of,
)
from mcp_cancellation.scope import PRINCIPAL_KEY

from ..support import MakeRegistry, RedisServer, async_wait_until
from ._util import in_flight, rows


def _http(client: str, **extra: Any) -> dict[str, Any]:
    return {"type": "http", "headers": [], "client": (client, 50_000), **extra}


def _user(client_id: str, token: str) -> AuthenticatedUser:
    return AuthenticatedUser(AccessToken(token=token, client_id=client_id, scopes=["tools"]))


async def test_cancel_records_a_row_with_its_reason(registry: CancellationRegistry) -> None:
    assert not await registry.is_cancelled(7, scope="s")
    assert await registry.reason(7, scope="s") is None
    await registry.cancel(7, "user pressed stop", scope="s")
    assert await registry.is_cancelled(7, scope="s")
    assert await registry.reason(7, scope="s") == "user pressed stop"
    assert await rows(registry) == {"s": 1}


async def test_cancel_without_reason(registry: CancellationRegistry) -> None:
    await registry.cancel("abc", scope="s")
    assert await registry.is_cancelled("abc", scope="s")
    assert await registry.reason("abc", scope="s") is None


async def test_default_scope_is_global(registry: CancellationRegistry) -> None:
    await registry.cancel(1)
    assert await registry.is_cancelled(1, scope="global")
    assert await rows(registry) == {"global": 1}


async def test_reason_is_stored_sanitised(registry: CancellationRegistry) -> None:
    await registry.cancel(1, "a\x00b\u202ec\u200d" + "x" * 500, scope="s")
    reason = await registry.reason(1, scope="s")
    assert reason == "abc" + "x" * 197


async def test_reason_limit_is_configurable(make_registry: MakeRegistry) -> None:
    registry = make_registry(max_reason_chars=5)
    await registry.cancel(1, "abcdefgh", scope="s")
    assert await registry.reason(1, scope="s") == "abcde"


async def test_cancelling_again_updates_the_reason_not_the_count(
    registry: CancellationRegistry,
) -> None:
    await registry.cancel(1, "first", scope="s")
    await registry.cancel(1, "second", scope="s")
    assert await registry.reason(1, scope="s") == "second"
    assert await rows(registry) == {"s": 1}


async def test_cancel_does_not_require_the_request_in_flight(
    registry: CancellationRegistry,
) -> None:
    # registry.cancel() is for library callers: it records even an unknown id.
    assert not await registry.in_flight(99, scope="s")
    await registry.cancel(99, scope="s")
    assert await registry.is_cancelled(99, scope="s")


async def test_clear_removes_only_that_row(registry: CancellationRegistry) -> None:
    await registry.cancel(1, scope="s")
    await registry.cancel(2, scope="s")
    await registry.cancel(1, scope="t")
    await registry.clear(1, scope="s")
    assert not await registry.is_cancelled(1, scope="s")
    assert await registry.is_cancelled(2, scope="s")
    assert await registry.is_cancelled(1, scope="t")
    assert await rows(registry) == {"s": 1, "t": 1}


async def test_clear_of_an_absent_row_is_harmless(registry: CancellationRegistry) -> None:
    await registry.clear(1, scope="nowhere")
    await registry.cancel(1, scope="s")
    await registry.clear(2, scope="s")
    await registry.clear(1, scope="s")
    await registry.clear(1, scope="s")
    assert await rows(registry) == {}


# -- scopes keep callers apart (seed cases) ---------------------------------------------


async def test_id_1_of_one_client_is_not_id_1_of_another(registry: CancellationRegistry) -> None:
    alice, bob = scope_of(_http("192.0.2.1")), scope_of(_http("192.0.2.2"))
    assert alice != bob
    alice_token = await registry.track(1, scope=alice)
    bob_token = await registry.track(1, scope=bob)

    assert await registry.cancel_in_flight(1, "alice stops hers", scope=alice)
    assert alice_token.cancelled
    assert not bob_token.cancelled
    assert not await registry.is_cancelled(1, scope=bob)

    await registry.cancel(1, "bob's own", scope=bob)
    await registry.clear(1, scope=alice)
    assert await registry.is_cancelled(1, scope=bob)
    assert await registry.reason(1, scope=bob) == "bob's own"


async def test_two_principals_behind_one_ip_are_separate(registry: CancellationRegistry) -> None:
    alice = scope_of(_http("192.0.2.1", user=_user("alice-app", "t-alice")))
    bob = scope_of(_http("192.0.2.1", user=_user("bob-app", "t-bob")))
    anonymous = scope_of(_http("192.0.2.1"))
    assert alice == "principal:alice-app"
    assert bob == "principal:bob-app"
    assert anonymous == "ip:192.0.2.1"

    bob_token = await registry.track(1, scope=bob)
    await registry.cancel(1, scope=alice)
    assert not bob_token.cancelled
    assert not await registry.is_cancelled(1, scope=bob)
    assert not await registry.is_cancelled(1, scope=anonymous)
    assert not await registry.cancel_in_flight(1, scope=anonymous)
    assert not bob_token.cancelled


async def test_principal_named_like_an_ip_is_not_that_ip(registry: CancellationRegistry) -> None:
    principal = scope_of(_http("198.51.100.9", **{PRINCIPAL_KEY: "192.0.2.1"}))
    address = scope_of(_http("192.0.2.1"))
    assert principal == "principal:192.0.2.1"
    assert address == "ip:192.0.2.1"

    victim = await registry.track(5, scope=address)
    assert not await registry.cancel_in_flight(5, scope=principal)
    await registry.cancel(5, scope=principal)
    assert not victim.cancelled
    assert not await registry.is_cancelled(5, scope=address)
    assert await rows(registry) == {principal: 1}


# -- request(): the block's token and the current-request functions --------------------


async def test_request_block_sees_its_cancellation(registry: CancellationRegistry) -> None:
    assert current_token() is None
    assert not cancelled()
    async with registry.request(3, scope="s") as token:
        assert current_token() is token
        assert not cancelled()
        raise_if_cancelled()
        assert await registry.in_flight(3, scope="s")
        assert await registry.cancel_in_flight(3, "enough", scope="s")
        assert token.cancelled
        assert token.reason == "enough"
        assert cancelled()
        with pytest.raises(RequestCancelled, match="enough") as info:
            raise_if_cancelled()
        assert info.value.reason == "enough"
        with pytest.raises(RequestCancelled):
            token.raise_if_cancelled()
    assert current_token() is None
    assert not cancelled()
    # Leaving the block untracks the request and clears its cancellation row.
    assert not await registry.in_flight(3, scope="s")
    assert not await registry.is_cancelled(3, scope="s")
    assert await rows(registry) == {}
    assert await in_flight(registry) == {}


async def test_request_cleans_up_when_the_block_raises(registry: CancellationRegistry) -> None:
    async def tool() -> None:
        async with registry.request(3, scope="s"):
            await registry.cancel(3, scope="s")
            raise_if_cancelled()

    with pytest.raises(RequestCancelled):
        await tool()
    assert await rows(registry) == {}
    assert await in_flight(registry) == {}


async def test_request_of_an_already_cancelled_id_starts_cancelled(
    registry: CancellationRegistry,
) -> None:
    await registry.cancel(3, "before it began", scope="s")
    async with registry.request(3, scope="s") as token:
        assert token.cancelled
        assert token.reason == "before it began"


async def test_track_of_an_already_cancelled_id_starts_cancelled(
    registry: CancellationRegistry,
) -> None:
    await registry.cancel(3, "early", scope="s")
    token = await registry.track(3, scope="s")
    assert token.cancelled
    assert token.reason == "early"
    await registry.untrack(3, scope="s")


async def test_a_request_started_after_its_id_was_found_not_in_flight_is_not_cancelled(
    registry: CancellationRegistry,
) -> None:
    """The caller was told the id is not in flight; a request of that id started after
    that (an id reused at once) is a new one, on every backend (on Redis, the miss a
    refused cancellation leaves for a track still on its way is not for it)."""
    assert not await registry.cancel_in_flight(5, "too early", scope="s")

    async def landed() -> bool:  # (on Redis, once it has run its track delay)
        return await in_flight(registry) == {"s": 1}

    async with registry.request(5, scope="s") as token:
        await async_wait_until(landed)  # its track landed
        assert not token.cancelled
    assert not await registry.is_cancelled(5, scope="s")


async def test_token_is_readable_from_a_worker_thread(registry: CancellationRegistry) -> None:
    seen: list[bool] = []
    async with registry.request(8, scope="s") as token:
        await registry.cancel_in_flight(8, scope="s")
        await asyncio.to_thread(lambda: seen.extend([token.cancelled, cancelled()]))
    assert seen == [True, True]


# -- clear reads before it writes -------------------------------------------------------


@pytest.mark.redis
async def test_clear_of_an_absent_row_writes_nothing_on_redis(redis_server: RedisServer) -> None:
    from mcp_cancellation.storage.redis import RedisStorage

    storage = RedisStorage.from_url(redis_server.url, prefix=f"clear-{uuid.uuid4().hex[:10]}")
    registry = CancellationRegistry(storage, janitor_interval=None)
    try:
        await registry.cancel(1, scope="s")
        client = storage.client
        await client.config_resetstat()
        await registry.clear(2, scope="s")
        await registry.clear(1, scope="other")
        stats = await client.info("commandstats")
        writes = {name: stats[name]["calls"] for name in stats if _is_write(name)}
        assert writes == {}
        assert stats["cmdstat_hexists"]["calls"] >= 2  # it did read
        await registry.clear(1, scope="s")
        stats = await client.info("commandstats")
        assert any(_is_write(name) for name in stats)
    finally:
        await registry.aclose()


def _is_write(cmdstat: str) -> bool:
    # SET is left out: the storage's background heartbeat refreshes a key with it.
    name = cmdstat.removeprefix("cmdstat_")
    return name in {"hdel", "zrem", "zadd", "zincrby", "del", "unlink", "hset", "srem"}


async def test_nested_requests_restore_the_outer_token(registry: CancellationRegistry) -> None:
    async with registry.request(1, scope="s") as outer:
        async with registry.request(2, scope="s") as inner:
            assert current_token() is inner
            await registry.cancel_in_flight(2, scope="s")
            assert cancelled()
        assert current_token() is outer
        assert not cancelled()
        assert await registry.in_flight(1, scope="s")
        assert not await registry.in_flight(2, scope="s")
    assert current_token() is None


async def test_tasks_started_inside_a_request_see_its_token(
    registry: CancellationRegistry,
) -> None:
    async def child() -> bool:
        await asyncio.sleep(0)
        return cancelled()

    async with registry.request(1, scope="s") as token:
        await registry.cancel_in_flight(1, scope="s")
        assert await asyncio.create_task(child())
        assert token.cancelled
