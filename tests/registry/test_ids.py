"""Request ids: an int (not a bool) or a str of at most 256 UTF-8 bytes; 42 and "42" are one
row; anything else raises InvalidRequestId and writes nothing; None is a no-op."""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_cancellation import CancellationRegistry, InvalidRequestId
from mcp_cancellation._ids import MAX_ID_BYTES, normalize_id

from ._util import in_flight, rows


class _Color(enum.IntEnum):
    RED = 7


class _Text(str):
    def __str__(self) -> str:  # a subclass cannot change the row key
        return "something else"


VALID: list[tuple[object, str]] = [
    (0, "0"),
    (42, "42"),
    ("42", "42"),
    (-1, "-1"),
    ("", ""),
    ("a" * MAX_ID_BYTES, "a" * MAX_ID_BYTES),
    ("é" * (MAX_ID_BYTES // 2), "é" * (MAX_ID_BYTES // 2)),  # 2 bytes each: exactly 256
    ("€" * 85, "€" * 85),  # 3 bytes each: 255 bytes
    (10**255, str(10**255)),  # 256 digits
    (-(10**254), str(-(10**254))),  # 256 characters with the sign
    (_Color.RED, "7"),
    (_Text("abc"), "abc"),
]

INVALID: list[object] = [
    True,
    False,
    42.0,
    1.5,
    float("nan"),
    {},
    {"id": 1},
    [],
    [1],
    (1,),
    b"42",
    object(),
    "a" * (MAX_ID_BYTES + 1),
    "é" * (MAX_ID_BYTES // 2) + "a",  # 257 bytes in 129 characters
    "€" * 86,  # 258 bytes in 86 characters
    "\ud800",  # a lone surrogate has no UTF-8 form
    10**256,  # 257 digits
    -(10**255),  # 257 characters with the sign
    2**100_000,  # huge: rejected without converting it to text
    -(2**100_000),
]


@pytest.mark.parametrize(("request_id", "key"), VALID, ids=repr)
def test_valid_ids_normalise_to_their_text(request_id: object, key: str) -> None:
    assert normalize_id(request_id) == key
    assert type(normalize_id(request_id)) is str


def _id_of(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return f"int{value.bit_length()}bits"  # repr() of a huge int itself raises
    return type(value).__name__ + repr(value)[:20]


@pytest.mark.parametrize("request_id", INVALID, ids=_id_of)
def test_invalid_ids_raise(request_id: object) -> None:
    with pytest.raises(InvalidRequestId):
        normalize_id(request_id)


def test_invalid_request_id_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="request id"):
        normalize_id(True)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=-(10**200), max_value=10**200))
def test_int_and_its_decimal_text_are_one_key(value: int) -> None:
    assert normalize_id(value) == normalize_id(str(value)) == str(value)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_strings_are_accepted_exactly_up_to_256_utf8_bytes(text: str) -> None:
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        size = MAX_ID_BYTES + 1  # lone surrogates: never valid
    if size <= MAX_ID_BYTES:
        assert normalize_id(text) == text
    else:
        with pytest.raises(InvalidRequestId):
            normalize_id(text)


# -- through the registry, on every backend ---------------------------------------------


async def test_42_and_string_42_are_one_row(registry: CancellationRegistry) -> None:
    await registry.cancel(42, "first", scope="ip:192.0.2.1")
    assert await registry.is_cancelled("42", scope="ip:192.0.2.1")
    assert await registry.reason("42", scope="ip:192.0.2.1") == "first"
    await registry.cancel("42", "second", scope="ip:192.0.2.1")
    assert await rows(registry) == {"ip:192.0.2.1": 1}
    assert await registry.reason(42, scope="ip:192.0.2.1") == "second"
    await registry.clear("42", scope="ip:192.0.2.1")
    assert not await registry.is_cancelled(42, scope="ip:192.0.2.1")
    assert await rows(registry) == {}


async def test_42_and_string_42_are_one_in_flight_request(
    registry: CancellationRegistry,
) -> None:
    token = await registry.track(42, scope="s")
    assert await registry.in_flight("42", scope="s")
    assert await registry.cancel_in_flight("42", "stop", scope="s")
    assert token.cancelled
    assert token.reason == "stop"
    await registry.untrack("42", scope="s")
    assert not await registry.in_flight(42, scope="s")


def _invalid_calls(
    registry: CancellationRegistry, bad: object
) -> list[Callable[[], Awaitable[object]]]:
    return [
        lambda: registry.cancel(bad, "r", scope="s"),
        lambda: registry.cancel_in_flight(bad, "r", scope="s"),
        lambda: registry.is_cancelled(bad, scope="s"),
        lambda: registry.reason(bad, scope="s"),
        lambda: registry.clear(bad, scope="s"),
        lambda: registry.track(bad, scope="s"),
        lambda: registry.untrack(bad, scope="s"),
        lambda: registry.in_flight(bad, scope="s"),
    ]


@pytest.mark.parametrize(
    "bad",
    [True, False, 1.0, {"a": 1}, [1], "x" * 257, 10**300, 2**100_000],
    ids=["True", "False", "float", "dict", "list", "str257", "int301digits", "hugeint"],
)
async def test_invalid_ids_raise_and_write_nothing(
    registry: CancellationRegistry, bad: object
) -> None:
    await registry.cancel(1, "existing", scope="s")
    for call in _invalid_calls(registry, bad):
        with pytest.raises(InvalidRequestId):
            await call()
    with pytest.raises(InvalidRequestId):
        registry.request(bad, scope="s")  # validated before the block runs
    assert await rows(registry) == {"s": 1}
    assert await in_flight(registry) == {}
    assert await registry.reason(1, scope="s") == "existing"


async def test_none_is_a_no_op(registry: CancellationRegistry) -> None:
    await registry.cancel(None, "r", scope="s")
    assert not await registry.cancel_in_flight(None, "r", scope="s")
    assert not await registry.is_cancelled(None, scope="s")
    assert await registry.reason(None, scope="s") is None
    await registry.clear(None, scope="s")
    token = await registry.track(None, scope="s")
    assert not token.cancelled
    await registry.untrack(None, scope="s")
    assert not await registry.in_flight(None, scope="s")
    async with registry.request(None, scope="s") as token:
        assert not token.cancelled
    assert await rows(registry) == {}
    assert await in_flight(registry) == {}
