"""Sanitising cancellation reasons.

A reason is client-supplied text that ends up in logs, span attributes and tool code, so
it is stringified without ever raising, stripped of invalid UTF-8 and of characters that
can hide or reorder text (C0 and C1 controls, DEL, bidi controls, zero-width characters),
and truncated.
"""

from __future__ import annotations

__all__ = ["MAX_REASON_CHARS", "sanitize_reason"]

MAX_REASON_CHARS = 200

_STRIPPED: dict[int, None] = dict.fromkeys(
    [
        *range(0x20),  # C0 controls
        0x7F,  # DEL
        *range(0x80, 0xA0),  # C1 controls
        0x061C,  # Arabic letter mark
        *range(0x200B, 0x2010),  # zero-width space .. right-to-left mark
        *range(0x2028, 0x202F),  # line/paragraph separators, bidi embeddings/overrides
        0x2060,  # word joiner
        *range(0x2066, 0x206A),  # bidi isolates
        0xFEFF,  # zero-width no-break space / BOM
    ]
)


def _text_of(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "ignore")
    try:
        return str(value)
    except Exception:
        try:
            return repr(value)
        except Exception:
            return f"<unprintable {type(value).__name__}>"


def sanitize_reason(value: object, max_chars: int = MAX_REASON_CHARS) -> str | None:
    """Return *value* as safe display text of at most *max_chars* characters.

    ``None`` and text that is empty once cleaned give ``None``. Work is bounded by
    *max_chars*, not by the input's size, so a megabyte reason costs no more than a short one.
    """
    if value is None or max_chars <= 0:
        return None
    if type(value) is str and len(value) <= max_chars and value.isascii() and value.isprintable():
        # The usual reason: short printable ASCII holds nothing the loop below removes.
        return value or None
    text = _text_of(value)
    out: list[str] = []
    length = 0
    start = 0
    chunk = max(max_chars, 64)
    while length < max_chars and start < len(text):
        piece = text[start : start + chunk]
        start += chunk
        # Lone surrogates cannot be encoded as UTF-8: drop them like any invalid byte.
        piece = piece.encode("utf-8", "ignore").decode("utf-8").translate(_STRIPPED)
        piece = piece[: max_chars - length]
        out.append(piece)
        length += len(piece)
    result = "".join(out)
    return result or None
