"""The in-flight tokens of this process: ``(scope, key) -> owner(s) and token(s)``.

Both storages keep one: the memory storage as its in-flight table, the Redis storage as the
local half of its table (the tokens it flips when a cancellation is pushed). The owner-pop
and the dead-owner sweep live here once. Not thread-safe by itself: each storage calls it
under its own lock.

A request almost always has one owner, so its entry is then an ``(owner, token)`` pair
(56 bytes), and becomes an ``{owner: token}`` dict only while a second owner tracks the
same id (a dict costs 4x the pair; measured in ``benchmarks/registry.py``, 1b.).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from .._token import RequestToken

__all__ = ["InFlightTokens", "OwnerKey"]

#: One owner of a request: (scope, key, owner id) (its in-flight row, as the API says).
OwnerKey = tuple[str, str, str]

#: The owners of one request: ``(owner, token)`` for one, ``{owner: token}`` for several.
_Owners: TypeAlias = "tuple[str, RequestToken] | dict[str, RequestToken]"


def _items(entry: _Owners) -> Iterator[tuple[str, RequestToken]]:
    if isinstance(entry, tuple):
        yield entry
    else:
        yield from entry.items()


class InFlightTokens(dict[tuple[str, str], _Owners]):
    """Tokens by request ``(scope, key)`` and owner; a request's entry goes with its last
    owner.

    It is the dict itself, so that a storage's hot path does the single-owner case with
    plain dict operations under its lock (``setdefault`` of the pair, ``del`` of it) and
    calls a method only for the rest.
    """

    __slots__ = ()

    def add(self, scope: str, key: str, owner: str, token: RequestToken) -> None:
        """Track *owner*'s row (replacing its earlier token, if any)."""
        entry = self.get((scope, key))
        if entry is None or (isinstance(entry, tuple) and entry[0] == owner):
            self[(scope, key)] = (owner, token)
        elif isinstance(entry, tuple):
            self[(scope, key)] = {entry[0]: entry[1], owner: token}
        else:
            entry[owner] = token

    def discard(self, scope: str, key: str, owner: str) -> bool:
        """Remove *owner*'s row only; whether it was there."""
        entry = self.get((scope, key))
        if entry is None:
            return False
        if isinstance(entry, tuple):
            if entry[0] != owner:
                return False
            del self[(scope, key)]
            return True
        if entry.pop(owner, None) is None:
            return False
        if len(entry) == 1:
            ((left, token),) = entry.items()
            self[(scope, key)] = (left, token)
        return True

    def count(self, scope: str, key: str) -> int:
        """How many owners track ``(scope, key)``."""
        entry = self.get((scope, key))
        return 0 if entry is None else 1 if isinstance(entry, tuple) else len(entry)

    def holds(self, scope: str, key: str, owner: str) -> bool:
        """Whether *owner* tracks ``(scope, key)``."""
        entry = self.get((scope, key))
        if entry is None:
            return False
        return entry[0] == owner if isinstance(entry, tuple) else owner in entry

    def owners(self, scope: str, key: str) -> list[tuple[str, RequestToken]]:
        """The ``(owner, token)`` pairs of ``(scope, key)``."""
        entry = self.get((scope, key))
        return [] if entry is None else list(_items(entry))

    def tokens(self, scope: str, key: str) -> list[RequestToken]:
        """The tokens of ``(scope, key)``."""
        entry = self.get((scope, key))
        if entry is None:
            return []
        return [token for _, token in _items(entry)]

    def sweep(self, dead: Collection[str]) -> list[OwnerKey]:
        """Remove every row whose owner is in *dead*; the rows removed."""
        removed: list[OwnerKey] = []
        if not dead:
            return removed
        for (scope, key), entry in list(self.items()):
            for owner, _ in list(_items(entry)):
                if owner in dead:
                    self.discard(scope, key, owner)
                    removed.append((scope, key, owner))
        return removed

    def counts(self) -> dict[str, int]:
        """In-flight rows per scope."""
        counts: dict[str, int] = {}
        for (scope, _), entry in self.items():
            n = 1 if isinstance(entry, tuple) else len(entry)
            counts[scope] = counts.get(scope, 0) + n
        return counts

    def rows(self) -> Iterator[tuple[str, str, str, RequestToken]]:
        """Every row with its token: ``(scope, key, owner, token)``."""
        for (scope, key), entry in self.items():
            for owner, token in _items(entry):
                yield scope, key, owner, token
