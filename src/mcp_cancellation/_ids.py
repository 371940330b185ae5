"""Request-id validation and normalisation (private).

JSON-RPC ids are client-chosen. The registry accepts an ``int`` (never a ``bool``) or a
``str`` of at most :data:`MAX_ID_BYTES` UTF-8 bytes, and keys rows by the id's decimal or
literal text, so ``42`` and ``"42"`` name the same row.
"""

from __future__ import annotations

from ._errors import InvalidRequestId

MAX_ID_BYTES = 256
# 256 decimal digits need at most 851 bits; anything wider cannot fit, and checking the
# bit length first keeps a hostile 10**100000 from costing a quadratic str() conversion.
_MAX_INT_BITS = 851


_INT_BOUND = 10**MAX_ID_BYTES  # ints strictly inside (-10**255, 10**256) fit 256 chars
_NEG_BOUND = -(10 ** (MAX_ID_BYTES - 1))


def normalize_id(request_id: object) -> str:
    """Return the row key for *request_id*, or raise :class:`InvalidRequestId`."""
    if type(request_id) is int and _NEG_BOUND < request_id < _INT_BOUND:
        return str(request_id)
    if type(request_id) is str:
        if len(request_id) <= MAX_ID_BYTES:  # every character is at least one byte
            if request_id.isascii():
                return request_id
            try:
                size = len(request_id.encode("utf-8"))
            except UnicodeEncodeError:  # lone surrogates from a JSON "\\ud800" escape
                raise InvalidRequestId("request id is not valid UTF-8") from None
            if size <= MAX_ID_BYTES:
                return request_id
        raise InvalidRequestId(f"request id is longer than {MAX_ID_BYTES} UTF-8 bytes")
    if isinstance(request_id, int) and not isinstance(request_id, bool):
        if request_id.bit_length() <= _MAX_INT_BITS:
            text = str(int(request_id))
            if len(text) <= MAX_ID_BYTES:
                return text
        raise InvalidRequestId(f"integer request id has more than {MAX_ID_BYTES} digits")
    if isinstance(request_id, str):  # a str subclass: keep its plain text only
        return normalize_id(str.__str__(request_id))
    raise InvalidRequestId(f"request id must be an int or a str, not {type(request_id).__name__}")
