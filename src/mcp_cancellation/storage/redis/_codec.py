"""How values travel to and from Redis: bytes, reasons, row members, pub/sub messages."""

from __future__ import annotations

from typing import Any

__all__ = [
    "collect_evicted",
    "decode_reason",
    "encode_reason",
    "member",
    "split_netstrings",
    "text",
    "to_bytes",
]


def to_bytes(value: str | bytes) -> bytes:
    """*value* as bytes (``str`` encoded so that any code point round-trips)."""
    return value.encode("utf-8", "surrogatepass") if isinstance(value, str) else value


def text(value: bytes | str) -> str:
    """A reply (bytes, or ``str`` from a decoding client) as ``str``."""
    return value if isinstance(value, str) else value.decode("utf-8", "surrogatepass")


def encode_reason(reason: str | None) -> bytes:
    """``-`` for no reason, ``+<reason>`` otherwise (an empty reason stays distinct)."""
    return b"-" if reason is None else b"+" + to_bytes(reason)


def decode_reason(value: bytes | str) -> str | None:
    raw = to_bytes(value)
    return None if raw[:1] == b"-" else raw[1:].decode("utf-8", "surrogatepass")


def member(scope: str, key: str) -> bytes:
    """A row's member ``<#scope>:<scope><key>``: unambiguous for any bytes, since the
    scope's byte length comes first."""
    raw = to_bytes(scope)
    return str(len(raw)).encode() + b":" + raw + to_bytes(key)


def split_netstrings(data: bytes) -> list[bytes]:
    """Split ``<len>:<bytes><len>:<bytes>...`` (the pub/sub message format)."""
    out: list[bytes] = []
    pos = 0
    while pos < len(data):
        colon = data.index(b":", pos)
        size = int(data[pos:colon])
        out.append(data[colon + 1 : colon + 1 + size])
        pos = colon + 1 + size
    return out


def collect_evicted(evicted: list[tuple[str, int]], reply: list[Any]) -> None:
    """Append one ``ADD`` reply's evictions, in eviction order, to *evicted*; a scope that
    one call left part-way and the next finished is one entry, as if evicted at once."""
    found = [(text(reply[i]), int(reply[i + 1])) for i in range(5, len(reply), 2)]
    if reply[1]:  # one-row scopes evicted whole, after the others
        found += [(text(s), 1) for s in split_netstrings(to_bytes(reply[1]))]
    for scope, count in found:
        if evicted and evicted[-1][0] == scope:
            evicted[-1] = (scope, evicted[-1][1] + count)
        else:
            evicted.append((scope, count))
