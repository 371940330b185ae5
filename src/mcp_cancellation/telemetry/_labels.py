"""Scope labels: how a scope is shown in metric labels and span attributes (private).

Session ids are bearer secrets, so a ``session:<id>`` scope is never exported as is: it is
shown as ``session:`` followed by the first 12 hex digits of HMAC-SHA256(key, id). The key
comes from the ``hash_key`` argument of the bridges, else ``$MCP_CANCELLATION_SCOPE_HASH_KEY``,
else a fixed, public default. A fixed default keeps labels stable across workers and restarts,
so counters and top-K series from several processes aggregate; it is safe for random session
ids (the SDK's are 128-bit UUIDs, which a 48-bit digest cannot be inverted to), and a secret
key (the same on every worker) additionally protects guessable ids.

Other scopes are shown verbatim (an operator needs to see which address or principal is
misbehaving), except that very long ones are cut and suffixed with a digest so that a label
stays short and distinct.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import threading

__all__ = ["DEFAULT_HASH_KEY", "HASH_KEY_ENV", "MAX_LABEL_CHARS", "ScopeLabeler", "resolve_key"]

#: Environment variable holding the key for session-scope digests.
HASH_KEY_ENV = "MCP_CANCELLATION_SCOPE_HASH_KEY"
#: The key used when none is configured (public; see the module docstring).
DEFAULT_HASH_KEY = b"mcp-cancellation/scope-label/v1"
#: Scopes longer than this are shortened in labels.
MAX_LABEL_CHARS = 128
_DIGEST_HEX = 12
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
        elif len(scope) > MAX_LABEL_CHARS:
            label = scope[: MAX_LABEL_CHARS - _DIGEST_HEX - 1] + "~" + self.digest(scope)
        else:
            label = scope
        with self._lock:
            if len(self._cache) >= _CACHE_SIZE:
                self._cache.clear()
            self._cache[scope] = label
        return label
