"""How values travel to and from Redis: bytes, reasons, row members, pub/sub messages,
and the arguments and replies of the scripts."""

from __future__ import annotations

from typing import Any

from .._base import InFlightRequest

__all__ = [
    "collect_evicted",
    "decode_in_flight",
    "decode_reason",
    "encode_reason",
    "member",
    "netstring",
    "split_member",
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
    """The reason of an encoded row value (a pending row's ``*`` mark dropped)."""
    raw = to_bytes(value).removeprefix(b"*")
    return None if raw[:1] == b"-" else raw[1:].decode("utf-8", "surrogatepass")


def member(scope: str, key: str) -> bytes:
    """A row's member ``<#scope>:<scope><key>``: unambiguous for any bytes, since the
    scope's byte length comes first."""
    raw = to_bytes(scope)
    return str(len(raw)).encode() + b":" + raw + to_bytes(key)


def netstring(value: str) -> bytes:
    """``<length>:<value>``, the length in bytes (as lua/base.lua's ``netstring``)."""
    raw = to_bytes(value)
    return str(len(raw)).encode() + b":" + raw


def split_member(m: bytes) -> tuple[str, str]:
    """``(scope, key)`` of a row's :func:`member`."""
    scope, key = _split_one(m)
    return text(scope), text(key)


def decode_in_flight(
    entry: bytes, track: bytes, mark: bytes | None, worker: str, alive: bool
) -> InFlightRequest:
    """An in-flight row as the operator view reads it: its entry ``<#m>:<m><owner>``, its
    owner's track ``<sequence>\t<started ms>\t<worker>\t<tool>`` and the request's mark
    ``<sequence>:<time µs>:<reason>``, if any (it reaches the owners of a sequence at or
    before its own, and those that started before its time), read from *worker*'s
    owners."""
    m, _owner = _split_one(to_bytes(entry))
    scope, key = _split_one(m)
    sequence, started, _, tool = to_bytes(track).split(b"\t", 3)
    reason: bytes | None = None
    if mark is not None:
        reached, at, value = _mark(to_bytes(mark))
        if int(sequence) <= reached or int(started) * 1000 <= at:
            reason = value
    return InFlightRequest(
        scope=text(scope),
        request_id=text(key),
        worker=worker,
        tool=text(tool) or None,
        started=int(started) / 1000,
        cancelled=reason is not None,
        reason=None if reason is None else decode_reason(reason),
        alive=alive,
    )


def _mark(mark: bytes) -> tuple[int, int, bytes]:
    """A mark's sequence, time (µs) and reason."""
    reached, _, rest = mark.partition(b":")
    at, _, value = rest.partition(b":")
    return int(reached), int(at), value


def flight_of(entry: bytes) -> tuple[bytes, bytes]:
    """An in-flight entry ``<#m>:<m><owner>`` as its row member and owner."""
    return _split_one(to_bytes(entry))


def _split_one(data: bytes) -> tuple[bytes, bytes]:
    """``<len>:<bytes>`` and what follows it."""
    colon = data.index(b":")
    end = colon + 1 + int(data[:colon])
    return data[colon + 1 : end], data[end:]


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
    found: list[tuple[str, int]] = []
    if reply[5]:  # (scope, count) netstring pairs
        fields = split_netstrings(to_bytes(reply[5]))
        found = [(text(fields[i]), int(fields[i + 1])) for i in range(0, len(fields), 2)]
    if reply[1]:  # one-row scopes evicted whole, after the others
        found += [(text(s), 1) for s in split_netstrings(to_bytes(reply[1]))]
    if found and evicted and evicted[-1][0] == found[0][0]:
        evicted[-1] = (found[0][0], evicted[-1][1] + found[0][1])
        del found[0]
    evicted += found
