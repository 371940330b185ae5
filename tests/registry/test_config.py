"""Limits from constructor arguments or MCP_CANCELLATION_* environment variables; bad values
raise ConfigurationError at construction."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_cancellation import CancellationRegistry, ConfigurationError, MemoryStorage

from ..support import RedisServer

ENV = {
    "max_rows": "MCP_CANCELLATION_MAX_ROWS",
    "max_rows_per_scope": "MCP_CANCELLATION_MAX_ROWS_PER_SCOPE",
    "ttl": "MCP_CANCELLATION_TTL",
    "janitor_interval": "MCP_CANCELLATION_JANITOR_INTERVAL",
}


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [*ENV.values(), "MCP_CANCELLATION_REDIS_URL"]:
        monkeypatch.delenv(name, raising=False)


def make(**kwargs: Any) -> CancellationRegistry:
    return CancellationRegistry(MemoryStorage(), **kwargs)


def test_defaults() -> None:
    registry = make()
    assert registry.max_rows == 10_000
    assert registry.max_rows_per_scope == 256
    assert registry.ttl == 300.0
    assert registry.janitor_interval == 60.0


def test_default_storage_is_memory() -> None:
    assert isinstance(CancellationRegistry().storage, MemoryStorage)


def test_arguments() -> None:
    registry = make(max_rows=50, max_rows_per_scope=5, ttl=1.5, janitor_interval=2)
    assert (registry.max_rows, registry.max_rows_per_scope) == (50, 5)
    assert (registry.ttl, registry.janitor_interval) == (1.5, 2.0)
    assert registry.limits.max_rows == 50
    assert registry.limits.max_rows_per_scope == 5


def test_none_disables_every_limit() -> None:
    registry = make(max_rows=None, max_rows_per_scope=None, ttl=None, janitor_interval=None)
    assert registry.max_rows is None
    assert registry.max_rows_per_scope is None
    assert registry.ttl is None
    assert registry.janitor_interval is None


def test_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_CANCELLATION_MAX_ROWS", "1234")
    monkeypatch.setenv("MCP_CANCELLATION_MAX_ROWS_PER_SCOPE", " 12 ")
    monkeypatch.setenv("MCP_CANCELLATION_TTL", "2.5")
    monkeypatch.setenv("MCP_CANCELLATION_JANITOR_INTERVAL", "7")
    registry = make()
    assert registry.max_rows == 1234
    assert registry.max_rows_per_scope == 12
    assert registry.ttl == 2.5
    assert registry.janitor_interval == 7.0


@pytest.mark.parametrize("word", ["none", "None", "NONE", " none "])
@pytest.mark.parametrize("name", list(ENV))
def test_environment_none_disables(monkeypatch: pytest.MonkeyPatch, name: str, word: str) -> None:
    monkeypatch.setenv(ENV[name], word)
    assert getattr(make(), name) is None


@pytest.mark.parametrize("name", list(ENV))
def test_an_empty_variable_means_the_default(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    default = getattr(make(), name)
    monkeypatch.setenv(ENV[name], "  ")
    assert getattr(make(), name) == default


def test_arguments_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_CANCELLATION_MAX_ROWS", "garbage")
    monkeypatch.setenv("MCP_CANCELLATION_MAX_ROWS_PER_SCOPE", "3")
    monkeypatch.setenv("MCP_CANCELLATION_TTL", "none")
    registry = make(max_rows=9, max_rows_per_scope=None, ttl=4)
    assert (registry.max_rows, registry.max_rows_per_scope, registry.ttl) == (9, None, 4.0)


async def test_environment_limits_are_enforced(monkeypatch: pytest.MonkeyPatch) -> None:
    from mcp_cancellation import CancellationLimitReached

    monkeypatch.setenv("MCP_CANCELLATION_MAX_ROWS_PER_SCOPE", "2")
    registry = make()
    await registry.cancel(1, scope="s")
    await registry.cancel(2, scope="s")
    with pytest.raises(CancellationLimitReached):
        await registry.cancel(3, scope="s")


@pytest.mark.parametrize(
    "value", ["0", "-1", "abc", "1.5", "1e4", "10 000", "0x10", "nan", "true", "12abc"]
)
@pytest.mark.parametrize("name", ["max_rows", "max_rows_per_scope"])
def test_bad_int_variables(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(ENV[name], value)
    with pytest.raises(ConfigurationError, match=ENV[name]):
        make()


@pytest.mark.parametrize("value", ["0", "-1", "abc", "nan", "-inf", "1s", "5 minutes"])
@pytest.mark.parametrize("name", ["ttl", "janitor_interval"])
def test_bad_seconds_variables(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(ENV[name], value)
    with pytest.raises(ConfigurationError, match=ENV[name]):
        make()


@pytest.mark.parametrize("value", [0, -5, 1.5, "10", True, False, 10.0, [1]])
@pytest.mark.parametrize("name", ["max_rows", "max_rows_per_scope"])
def test_bad_int_arguments(name: str, value: object) -> None:
    with pytest.raises(ConfigurationError, match=name):
        make(**{name: value})


@pytest.mark.parametrize("value", [0, -1.0, float("nan"), float("inf"), 10**400, "5", True])
@pytest.mark.parametrize("name", ["ttl", "janitor_interval"])
def test_bad_seconds_arguments(name: str, value: object) -> None:
    with pytest.raises(ConfigurationError, match=name):
        make(**{name: value})


@pytest.mark.parametrize("value", [1.5, "200", True, None])
def test_bad_max_reason_chars(value: object) -> None:
    with pytest.raises(ConfigurationError):
        make(max_reason_chars=value)


def test_configuration_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - the hierarchy is what is tested
        make(max_rows=0)


@pytest.mark.redis
async def test_redis_url_in_the_environment_selects_redis(
    monkeypatch: pytest.MonkeyPatch, redis_server: RedisServer
) -> None:
    from mcp_cancellation.storage.redis import RedisStorage

    monkeypatch.setenv("MCP_CANCELLATION_REDIS_URL", redis_server.url)
    registry = CancellationRegistry(janitor_interval=None)
    try:
        assert isinstance(registry.storage, RedisStorage)
        await registry.cancel(1, scope=f"env-{registry.instance_id}")
        assert await registry.is_cancelled(1, scope=f"env-{registry.instance_id}")
    finally:
        await registry.clear(1, scope=f"env-{registry.instance_id}")
        await registry.aclose()
