"""Caller scopes: whose cancellation namespace a request belongs to.

A row in the registry is keyed ``(scope, request_id)``. JSON-RPC ids are client-chosen and
collide across clients, so the scope is what stops one caller from cancelling, crowding
out or probing another's requests. In order of preference:

``session:<id>``
    a session id that *server* code validated and put in the ASGI scope under
    :data:`SESSION_KEY` (never a raw ``Mcp-Session-Id`` header, which any client can set);
``principal:<id>``
    an authenticated principal: a string under :data:`PRINCIPAL_KEY`, else the SDK's
    authenticated user (``scope["user"]``, its access token's client id, issuer and subject);
``ip:<bucket>``
    the client address (see :func:`client_bucket`), taken from ``X-Forwarded-For`` or
    ``Forwarded`` only when the direct peer is a trusted proxy;
``global``
    anything that is not an HTTP request (library callers, lifespan, tests).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import ipaddress
import os
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from ._errors import ConfigurationError

__all__ = [
    "PRINCIPAL_KEY",
    "SESSION_KEY",
    "client_bucket",
    "rows_by_kind",
    "scope_kind",
    "scope_of",
]

#: ASGI scope key under which server code puts a session id it has validated.
SESSION_KEY = "mcp_cancellation.session_id"
#: ASGI scope key under which server code may put an authenticated principal id.
PRINCIPAL_KEY = "mcp_cancellation.principal"

ScopeKind = Literal["session", "principal", "ip", "global", "other"]
SCOPE_KINDS: tuple[ScopeKind, ...] = ("session", "principal", "ip", "global", "other")

_Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def _parse_address(text: str) -> _Address | None:
    text = text.strip().strip('"')
    if text.startswith("["):  # "[2001:db8::1]:443" as in Forwarded
        text = text[1 : text.find("]")] if "]" in text else ""
    elif text.count(":") == 1:  # "192.0.2.1:8080"
        text = text.split(":", 1)[0]
    if "%" in text:  # zone index of a link-local address
        text = text.split("%", 1)[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def client_bucket(address: str | None) -> str:
    """Return the rate-limiting bucket of a client address.

    An IPv4 address is itself; an IPv4-mapped IPv6 address is its IPv4 form; any other IPv6
    address is its /64 (one subscriber usually holds a whole /64); anything unparsable is
    ``"unknown"``.

    >>> client_bucket("::ffff:192.0.2.7"), client_bucket("2001:db8:1:2:3:4:5:6")
    ('192.0.2.7', '2001:db8:1:2::/64')
    """
    if not address:
        return "unknown"
    parsed = _parse_address(address)
    if parsed is None:
        return "unknown"
    if isinstance(parsed, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((int(parsed) >> 64 << 64, 64)))
    return str(parsed)


def trusted_networks(entries: str | Iterable[str]) -> tuple[str, ...]:
    """*entries* (addresses or CIDR blocks, or one of them) as normalised networks; a
    :class:`~mcp_cancellation.ConfigurationError` names an entry that is neither."""
    networks = []
    for entry in (entries,) if isinstance(entries, str) else entries:
        try:
            networks.append(str(ipaddress.ip_network(str(entry).strip(), strict=False)))
        except ValueError as exc:
            raise ConfigurationError(f"invalid trusted proxy {entry!r}: {exc}") from None
    return tuple(networks)


@functools.lru_cache(maxsize=64)
def _networks(trusted: tuple[str, ...]) -> tuple[_Network, ...]:
    return tuple(ipaddress.ip_network(entry.strip(), strict=False) for entry in trusted)


def _trusted(address: _Address | None, networks: tuple[_Network, ...]) -> bool:
    return address is not None and any(address in network for network in networks)


def _header_values(scope: Mapping[str, Any], name: bytes) -> list[str]:
    values: list[str] = []
    for key, value in scope.get("headers") or ():
        if key.lower() == name:
            values.append(value.decode("latin-1"))
    return values


def _forwarded_chain(scope: Mapping[str, Any]) -> list[str]:
    """Client addresses named by proxies, nearest proxy's entry last."""
    forwarded = _header_values(scope, b"forwarded")
    if forwarded:
        chain: list[str] = []
        for element in ",".join(forwarded).split(","):
            for pair in element.split(";"):
                key, _, value = pair.strip().partition("=")
                if key.lower() == "for":
                    chain.append(value)
        return chain
    values = _header_values(scope, b"x-forwarded-for")
    # No header means no proxy spoke: an empty chain, so the peer itself is the client.
    return ",".join(values).split(",") if values else []


def client_address(scope: Mapping[str, Any], trusted_proxies: Iterable[str] = ()) -> str | None:
    """The client's address: the direct peer, or what trusted proxies say it is.

    Proxy headers are read right to left, skipping trusted proxies, and the first address
    that is not a trusted proxy is the client: entries left of it were written by the client
    itself and prove nothing.
    """
    client = scope.get("client")
    peer: str | None = client[0] if client else None
    networks = _networks(tuple(trusted_proxies))
    if not networks or not _trusted(_parse_address(peer) if peer else None, networks):
        return peer
    candidate = peer
    for entry in reversed(_forwarded_chain(scope)):
        candidate = entry.strip()
        if not _trusted(_parse_address(candidate), networks):
            return candidate
    return candidate


def principal_of(scope: Mapping[str, Any]) -> str | None:
    """The authenticated principal of an ASGI scope, or ``None``.

    Reads :data:`PRINCIPAL_KEY` if server code set it, else the SDK's authenticated user:
    its access token's ``client_id``, with issuer and subject when the verifier supplied
    them (a client id alone names an OAuth client, not the person using it).
    """
    explicit = scope.get(PRINCIPAL_KEY)
    if isinstance(explicit, str) and explicit:
        return explicit
    user = scope.get("user")
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    token = getattr(user, "access_token", None)
    client_id = getattr(token, "client_id", None)
    if isinstance(client_id, str) and client_id:
        subject = getattr(token, "subject", None)
        claims = getattr(token, "claims", None)
        issuer = claims.get("iss") if isinstance(claims, dict) else None
        if subject is None and issuer is None:
            return client_id
        return f"{client_id}|{issuer or ''}|{subject or ''}"
    username = getattr(user, "username", None)
    if isinstance(username, str) and username:
        return username
    return None


def scope_of(scope: Mapping[str, Any] | None, *, trusted_proxies: Iterable[str] = ()) -> str:
    """Return the cancellation scope of an ASGI scope (see the module docstring)."""
    if scope is None or scope.get("type") not in ("http", "websocket"):
        return "global"
    session = scope.get(SESSION_KEY)
    if isinstance(session, str) and session:
        return f"session:{session}"
    principal = principal_of(scope)
    if principal is not None:
        return f"principal:{principal}"
    return f"ip:{client_bucket(client_address(scope, trusted_proxies))}"


_PREFIXED: dict[str, ScopeKind] = {"session": "session", "principal": "principal", "ip": "ip"}


@functools.lru_cache(maxsize=4096)
def scope_kind(scope: str) -> ScopeKind:
    """The kind of a scope string: its prefix, ``global``, or ``other``. Cached: a bridge
    asks it for every recorded cancellation, nearly always of a scope it has just seen (a
    hit costs a third of working it out)."""
    if scope == "global":
        return "global"
    colon = scope.find(":")
    return "other" if colon < 0 else _PREFIXED.get(scope[:colon], "other")


def rows_by_kind(pairs: Iterable[tuple[str, int]]) -> dict[str, int]:
    """The rows of ``(scope, rows)`` pairs (an eviction batch) added up by scope kind.
    A flood's batch is thousands of scopes not seen lately: their kinds are worked out
    without :func:`scope_kind`'s cache, which they could only miss, and churn."""
    kind_of = scope_kind.__wrapped__
    rows: dict[str, int] = {}
    for scope, count in pairs:
        kind = kind_of(scope)
        rows[kind] = rows.get(kind, 0) + count
    return rows


# -- labels: how a scope is shown to operators --------------------------------------------
#
# Session ids are bearer secrets, so a ``session:<id>`` scope is never shown as is: it is
# shown as ``session:`` followed by the first 12 hex digits of HMAC-SHA256(key, id). The key
# comes from the ``hash_key`` argument of the bridges, else ``$MCP_CANCELLATION_SCOPE_HASH_KEY``,
# else a fixed, public default. A fixed default keeps labels stable across workers and
# restarts, so counters and top-K series from several processes aggregate; it is safe for
# random session ids (the SDK's are 128-bit UUIDs, which a 48-bit digest cannot be inverted
# to), and a secret key (the same on every worker) additionally protects guessable ids.
# Other scopes are shown verbatim (an operator needs to see which address or principal is
# misbehaving), except that very long ones are cut and suffixed with a digest so that a
# label stays short and distinct.

#: Environment variable holding the key for session-scope digests.
HASH_KEY_ENV = "MCP_CANCELLATION_SCOPE_HASH_KEY"
#: The key used when none is configured (public; see the module docstring).
DEFAULT_HASH_KEY = b"mcp-cancellation/scope-label/v1"
#: Scopes longer than this are shortened in labels.
MAX_LABEL_CHARS = 128
_DIGEST_HEX = 12
#: How a shortened label ends: ``~`` and the digest of the whole scope.
_SHORTENED = re.compile(r"~[0-9a-f]{12}\Z")
_CACHE_SIZE = 4096


def resolve_key(key: str | bytes | None) -> bytes:
    """The digest key: *key*, else ``$MCP_CANCELLATION_SCOPE_HASH_KEY``, else the default."""
    if key is None:
        key = os.environ.get(HASH_KEY_ENV) or DEFAULT_HASH_KEY
    return key.encode("utf-8") if isinstance(key, str) else bytes(key)


class ScopeLabeler:
    """Maps a scope to its exported label; memoises recent scopes (bounded, thread-safe)."""

    __slots__ = ("_cache", "_key", "_lock")

    def __init__(self, key: str | bytes | None = None) -> None:
        self._key = resolve_key(key)
        self._cache: dict[str, str] = {}
        self._lock = threading.Lock()

    @property
    def key(self) -> bytes:
        return self._key

    def digest(self, text: str) -> str:
        """The first 12 hex digits of HMAC-SHA256(key, *text*)."""
        mac = hmac.new(self._key, text.encode("utf-8", "surrogatepass"), hashlib.sha256)
        return mac.hexdigest()[:_DIGEST_HEX]

    def __call__(self, scope: str) -> str:
        label = self._cache.get(scope)
        if label is not None:
            return label
        if scope.startswith("session:"):
            label = "session:" + self.digest(scope[len("session:") :])
        elif len(scope) > MAX_LABEL_CHARS or _SHORTENED.search(scope):
            # (A scope that already ends as a shortened label does is shortened too: no
            # caller can choose a scope whose label is another's.)
            label = scope[: MAX_LABEL_CHARS - _DIGEST_HEX - 1] + "~" + self.digest(scope)
        else:
            label = scope
        with self._lock:
            if len(self._cache) >= _CACHE_SIZE:
                self._cache.clear()
            self._cache[scope] = label
        return label
