"""The in-flight tokens of this process: ``(scope, key) -> {owner: token}``.

Both storages keep one: the memory storage as its in-flight table, the Redis storage as the
local half of its table (the tokens it flips when a cancellation is pushed). The owner-pop
and the dead-owner sweep live here once. Not thread-safe by itself: each storage calls it
under its own lock.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..token import RequestToken

__all__ = ["InFlightTokens", "Row"]

#: One in-flight row: (scope, key, owner).
Row = tuple[str, str, str]


class InFlightTokens:
    """Tokens by request ``(scope, key)`` and owner; a request's entry goes with its last
    owner."""

    __slots__ = ("_table",)

    def __init__(self) -> None:
        self._table: dict[tuple[str, str], dict[str, RequestToken]] = {}

    def owners(self, scope: str, key: str) -> dict[str, RequestToken] | None:
        """The owners tracking ``(scope, key)`` and their tokens (do not mutate)."""
        return self._table.get((scope, key))

    def add(self, scope: str, key: str, owner: str, token: RequestToken) -> None:
        owners = self._table.get((scope, key))
        if owners is None:
            self._table[(scope, key)] = {owner: token}
        else:
            owners[owner] = token

    def pop(self, scope: str, key: str, owner: str) -> bool:
        """Remove *owner*'s row only; whether it was there."""
        owners = self._table.get((scope, key))
        if owners is None or owners.pop(owner, None) is None:
            return False
        if not owners:
            del self._table[(scope, key)]
        return True

    def tokens(
        self, scope: str, key: str, only: Collection[str] | None = None
    ) -> list[RequestToken]:
        """The tokens of ``(scope, key)``, of the owners in *only* if given."""
        owners = self._table.get((scope, key))
        if not owners:
            return []
        if only is None:
            return list(owners.values())
        return [token for owner, token in owners.items() if owner in only]

    def sweep(self, dead: Collection[str]) -> list[Row]:
        """Remove every row whose owner is in *dead*; the rows removed."""
        removed: list[Row] = []
        if not dead:
            return removed
        for (scope, key), owners in list(self._table.items()):
            for owner in [o for o in owners if o in dead]:
                del owners[owner]
                removed.append((scope, key, owner))
            if not owners:
                del self._table[(scope, key)]
        return removed

    def counts(self) -> dict[str, int]:
        """In-flight rows per scope."""
        counts: dict[str, int] = {}
        for (scope, _), owners in self._table.items():
            counts[scope] = counts.get(scope, 0) + len(owners)
        return counts

    def rows(self) -> Iterator[tuple[str, str, str, RequestToken]]:
        """Every row with its token: ``(scope, key, owner, token)``."""
        for (scope, key), owners in self._table.items():
            for owner, token in owners.items():
                yield scope, key, owner, token

    def __len__(self) -> int:
        """The number of requests ``(scope, key)`` with at least one owner."""
        return len(self._table)
