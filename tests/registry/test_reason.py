"""sanitize_reason: any object stringified without raising, invalid UTF-8 dropped, control,
bidi and zero-width characters stripped, at most 200 characters."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_cancellation import sanitize_reason
from mcp_cancellation._reason import MAX_REASON_CHARS

# Every character DESIGN.md says is stripped, class by class.
STRIPPED_CLASSES: dict[str, list[str]] = {
    "C0": [chr(c) for c in range(0x20)],
    "DEL": ["\x7f"],
    "C1": [chr(c) for c in range(0x80, 0xA0)],
    "arabic letter mark": ["\u061c"],
    "zero-width and LRM/RLM": [chr(c) for c in range(0x200B, 0x2010)],
    "separators and bidi embeddings": [chr(c) for c in range(0x2028, 0x202F)],
    "word joiner": ["\u2060"],
    "bidi isolates": [chr(c) for c in range(0x2066, 0x206A)],
    "BOM": ["\ufeff"],
}
ALL_STRIPPED = frozenset(c for chars in STRIPPED_CLASSES.values() for c in chars)


def test_default_limit_is_200() -> None:
    assert MAX_REASON_CHARS == 200


def test_plain_text_is_kept() -> None:
    assert sanitize_reason("user pressed stop") == "user pressed stop"
    assert sanitize_reason("héllo wörld — ✓ 日本語 😀") == "héllo wörld — ✓ 日本語 😀"


def test_none_and_empty_give_none() -> None:
    assert sanitize_reason(None) is None
    assert sanitize_reason("") is None
    assert sanitize_reason("\x00\u200b\ufeff") is None  # empty once cleaned
    assert sanitize_reason(b"") is None


@pytest.mark.parametrize("name", list(STRIPPED_CLASSES))
def test_every_stripped_class(name: str) -> None:
    chars = STRIPPED_CLASSES[name]
    mixed = "a" + "b".join(chars) + "z"
    assert sanitize_reason(mixed) == "a" + "b" * (len(chars) - 1) + "z"
    for char in chars:
        assert sanitize_reason(f"x{char}y") == "xy", repr(char)


def test_neighbours_of_stripped_ranges_are_kept() -> None:
    kept = ["\x20", "\x7e", "\xa0", "\u061b", "\u200a", "\u2010", "\u2027", "\u202f"]
    kept += ["\u205f", "\u2061", "\u2065", "\u206a", "\ufefe", "\ufff0"]
    for char in kept:
        assert sanitize_reason(f"x{char}y") == f"x{char}y", repr(char)


def test_bidi_override_attack_is_neutralised() -> None:
    assert sanitize_reason("invoice\u202egpj.exe") == "invoicegpj.exe"


def test_truncated_to_200_characters() -> None:
    assert sanitize_reason("x" * 201) == "x" * 200
    assert sanitize_reason("é" * 500) == "é" * 200
    assert sanitize_reason("😀" * 300) == "😀" * 200
    assert sanitize_reason("x" * 200) == "x" * 200


def test_truncation_counts_characters_after_stripping() -> None:
    text = "\u200b" * 1000 + "a" * 150 + "\x00" * 1000 + "b" * 150
    assert sanitize_reason(text) == "a" * 150 + "b" * 50


def test_max_chars_is_honoured() -> None:
    assert sanitize_reason("abcdef", max_chars=3) == "abc"
    assert sanitize_reason("abcdef", max_chars=0) is None
    assert sanitize_reason("abcdef", max_chars=-1) is None
    assert sanitize_reason("a" * 1000, max_chars=1000) == "a" * 1000


def test_a_megabyte_reason() -> None:
    huge = ("spam\u202e\x00" * 200_000)[: 1 << 20]
    assert len(huge) == 1 << 20
    assert sanitize_reason(huge) == "spam" * 50
    assert sanitize_reason(huge.encode("utf-8")) == "spam" * 50


def test_bytes_are_decoded_dropping_invalid_utf8() -> None:
    assert sanitize_reason(b"caf\xc3\xa9") == "café"
    assert sanitize_reason(b"ab\xff\xfecd\xc3") == "abcd"
    assert sanitize_reason(bytearray(b"x\x80y")) == "xy"
    assert sanitize_reason(memoryview(b"mv\xe2\x80\xaeok")) == "mvok"  # U+202E as UTF-8


def test_lone_surrogates_are_dropped() -> None:
    assert sanitize_reason("a\ud800b\udfffc") == "abc"
    assert sanitize_reason("\udc80" * 10) is None


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (42, "42"),
        (1.5, "1.5"),
        (True, "True"),
        ({"why": "x"}, "{'why': 'x'}"),
        (["a", 1], "['a', 1]"),
        (ValueError("boom"), "boom"),
    ],
)
def test_non_strings_are_stringified(value: object, text: str) -> None:
    assert sanitize_reason(value) == text


class _StrRaises:
    def __str__(self) -> str:
        raise RuntimeError("no str for you")

    def __repr__(self) -> str:
        return "<StrRaises>"


class _BothRaise:
    def __str__(self) -> str:
        raise RuntimeError("no")

    def __repr__(self) -> str:
        raise RuntimeError("no")


class _StrReturnsBytes:
    def __str__(self) -> str:
        return b"not a str"  # type: ignore[return-value]


class _NastyStr:
    def __str__(self) -> str:
        return "ok\x1b[31m\u202e" + "y" * 1000


class _Sub(str):
    pass


def test_objects_whose_str_raises() -> None:
    assert sanitize_reason(_StrRaises()) == "<StrRaises>"
    both = sanitize_reason(_BothRaise())
    assert both is not None
    assert "_BothRaise" in both
    assert sanitize_reason(_StrReturnsBytes()) is not None


def test_object_str_output_is_sanitised_too() -> None:
    assert sanitize_reason(_NastyStr()) == "ok[31m" + "y" * 194


def test_str_subclass_comes_back_as_plain_str() -> None:
    result = sanitize_reason(_Sub("hello"))
    assert result == "hello"
    assert type(result) is str


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(), st.binary(), st.integers(), st.floats(), st.none()))
def test_sanitised_output_is_always_clean(value: object) -> None:
    result = sanitize_reason(value)
    if result is None:
        return
    assert type(result) is str
    assert 0 < len(result) <= 200
    assert not ALL_STRIPPED.intersection(result)
    result.encode("utf-8")  # valid UTF-8: no lone surrogates left


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=400))
def test_sanitising_is_stripping_then_truncating(text: str) -> None:
    expected = "".join(c for c in text if c not in ALL_STRIPPED)[:200] or None
    assert sanitize_reason(text) == expected


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=260))
def test_ascii_reasons_of_every_length_are_stripped_and_truncated(text: str) -> None:
    """ASCII text (the usual reason, taken by a shortcut when printable and short) gives
    what the full rule gives, on both sides of the 200-character limit."""
    expected = "".join(c for c in text if c not in ALL_STRIPPED)[:200] or None
    assert sanitize_reason(text) == expected
    assert sanitize_reason(_Sub(text)) == expected  # a subclass never takes the shortcut
