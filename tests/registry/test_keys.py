"""Row keys never collide: scopes and ids that look alike once concatenated, unicode,
separators, empty strings and the longest ids stay distinct rows on every backend."""

from __future__ import annotations

import pytest

from mcp_cancellation import CancellationRegistry

from ._util import in_flight, rows

# (scope, id) pairs that a naive "scope:id" or "scope" + "id" key would merge.
LOOKALIKES: list[tuple[str, object]] = [
    ("s", "1:x"),
    ("s:1", "x"),
    ("s:", "1:x"),
    ("s", ":1:x"),
    ("s:1:x", ""),
    ("", "s:1:x"),
    ("3:s", "1"),
    ("3", ":s1"),
    ("ip:192.0.2.1", 1),
    ("ip:192.0.2.11", ""),
    ("ip:192.0.2.1", "1 "),
    ("ip:192.0.2.1", " 1"),
    ("ip:192.0.2.1", "01"),
    ("ip:192.0.2.1", -1),
    ("session:{tag}", "x"),
    ("session:{tag", "}x"),
    ("principal:é", "ü"),
    ("principal:éü", ""),
    ("principal:日本", "語😀"),
    ("ip:2001:db8::/64", "\n"),
    ("ip:2001:db8::/64", "\x00"),
    ("ip:2001:db8::/64", "a" * 256),
    ("ip:2001:db8::/64", "é" * 128),
]


async def test_lookalike_rows_stay_apart(registry: CancellationRegistry) -> None:
    for n, (scope, request_id) in enumerate(LOOKALIKES):
        await registry.cancel(request_id, f"reason {n}", scope=scope)
    for n, (scope, request_id) in enumerate(LOOKALIKES):
        assert await registry.reason(request_id, scope=scope) == f"reason {n}", (scope, request_id)
    expected: dict[str, int] = {}
    for scope, _ in LOOKALIKES:
        expected[scope] = expected.get(scope, 0) + 1
    assert await rows(registry) == expected
    for scope, request_id in LOOKALIKES[::2]:
        await registry.clear(request_id, scope=scope)
    for index, (scope, request_id) in enumerate(LOOKALIKES):
        assert await registry.is_cancelled(request_id, scope=scope) == (index % 2 == 1)


async def test_lookalike_in_flight_rows_stay_apart(registry: CancellationRegistry) -> None:
    tokens = [await registry.track(request_id, scope=scope) for scope, request_id in LOOKALIKES]
    assert sum((await in_flight(registry)).values()) == len(LOOKALIKES)
    for scope, request_id in LOOKALIKES[1::2]:
        assert await registry.cancel_in_flight(request_id, scope=scope)
    assert [token.cancelled for token in tokens] == [i % 2 == 1 for i in range(len(LOOKALIKES))]
    for scope, request_id in LOOKALIKES:
        await registry.untrack(request_id, scope=scope)
    assert await in_flight(registry) == {}


@pytest.mark.parametrize(
    "reason",
    [
        "-",
        "+",
        "-leading minus",
        "+leading plus",
        "日本語 😀 é",
        "x" * 200,
        "quote \" and ' and \\ backslash",
        "nul-free but spaces   ",
        "0",
    ],
)
async def test_reasons_round_trip(registry: CancellationRegistry, reason: str) -> None:
    token = await registry.track(1, scope="s")
    await registry.cancel_in_flight(1, reason, scope="s")
    assert await registry.reason(1, scope="s") == reason
    assert token.reason == reason
    await registry.untrack(1, scope="s")


async def test_an_empty_reason_is_no_reason(registry: CancellationRegistry) -> None:
    await registry.cancel(1, "", scope="s")
    await registry.cancel(2, "\u200b\x00", scope="s")
    assert await registry.is_cancelled(1, scope="s")
    assert await registry.reason(1, scope="s") is None
    assert await registry.reason(2, scope="s") is None
