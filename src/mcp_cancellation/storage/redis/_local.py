"""This worker's half of the Redis table: the tokens it flips, and what it still owes Redis
(the in-flight rows it could not release, its *orphans*, and the removal of the
cancellation rows a failed finish left). One lock, one owner of all three."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING

from .._in_flight import InFlightTokens, Row

if TYPE_CHECKING:
    from ...token import RequestToken

__all__ = ["LocalRequests"]


class LocalRequests:
    """In-flight tokens of this worker; *orphans*, rows whose untrack or finish did not
    reach Redis (unavailable, or cancelled midway), released by the next resync or
    cleanup; and *owed clears*, the ``(scope, key)`` of each request whose finish did not
    reach Redis, whose cancellation row the next resync removes as that finish would have.

    While a resync runs, the rows of its snapshot are *held*: the resync's script re-tracks
    each of them, so a release of one that reached Redis first would be undone (the row
    back in flight after its request ended, until a later resync). A release of a held row
    waits for the resync to end (:meth:`forget_unless_held`).

    Safe from any thread.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tokens = InFlightTokens()
        self._orphans: set[Row] = set()
        self._clears: set[tuple[str, str]] = set()
        self._held: frozenset[Row] = frozenset()
        self._resync: concurrent.futures.Future[None] | None = None  # done when it ends

    # -- tokens ------------------------------------------------------------------------

    def track(self, row: Row, token: RequestToken) -> None:
        """Register *token* (and stop owing a release for that row)."""
        scope, key, owner = row
        with self._lock:
            self._tokens.add(scope, key, owner, token)
            self._orphans.discard(row)

    def forget(self, row: Row) -> None:
        with self._lock:
            self._tokens.discard(*row)

    def forget_unless_held(self, row: Row) -> concurrent.futures.Future[None] | None:
        """Forget *row* before its release is sent to Redis, unless the running resync
        holds it: then nothing is forgotten, and the future of that resync's end is
        returned (try again once it is done)."""
        with self._lock:
            if self._resync is not None and row in self._held:
                return self._resync
            self._tokens.discard(*row)
            return None

    def tokens(
        self, scope: str, key: str, only: Collection[str] | None = None
    ) -> list[RequestToken]:
        with self._lock:
            return self._tokens.tokens(scope, key, only)

    def holds_others(self, scope: str, key: str) -> bool:
        """Whether this worker tracks anything besides one owner of ``(scope, key)``."""
        with self._lock:
            return len(self._tokens) > 1 or self._tokens.count(scope, key) > 1

    def begin_resync(self) -> list[tuple[str, str, str, RequestToken]]:
        """Every tracked row with its token, at one moment; each is held until
        :meth:`end_resync` (one resync at a time)."""
        with self._lock:
            snapshot = list(self._tokens.rows())
            self._held = frozenset((scope, key, owner) for scope, key, owner, _ in snapshot)
            self._resync = concurrent.futures.Future()
            return snapshot

    def end_resync(self) -> None:
        """The resync's script has run, or failed: its rows are released as usual again."""
        with self._lock:
            ended, self._resync = self._resync, None
            self._held = frozenset()
        if ended is not None:
            ended.set_result(None)

    def finished_since(self, snapshot: Iterable[tuple[str, str, str, RequestToken]]) -> list[Row]:
        """Rows of *snapshot* no longer tracked here (their request ended meanwhile)."""
        with self._lock:
            return [
                (scope, key, owner)
                for scope, key, owner, _ in snapshot
                if not self._tokens.holds(scope, key, owner)
            ]

    def sweep(self, dead: Collection[str]) -> list[Row]:
        """Drop the rows of *dead* owners; the rows dropped."""
        with self._lock:
            return self._tokens.sweep(dead)

    # -- orphans -----------------------------------------------------------------------

    def orphan(self, rows: Iterable[Row]) -> None:
        """Owe Redis a release of *rows*."""
        with self._lock:
            self._orphans.update(rows)

    def orphans(self) -> list[Row]:
        """The rows owed, sorted (a stable order for one script call)."""
        with self._lock:
            return sorted(self._orphans)

    def released(self, rows: Iterable[Row]) -> None:
        """*rows* were released in Redis."""
        with self._lock:
            self._orphans.difference_update(rows)

    def owe_clear(self, scope: str, key: str) -> None:
        """Owe Redis the removal of the cancellation row of ``(scope, key)``."""
        with self._lock:
            self._clears.add((scope, key))

    def owed_clears(self) -> list[tuple[str, str]]:
        """The cancellation rows owed a removal, sorted."""
        with self._lock:
            return sorted(self._clears)

    def cleared(self, pairs: Iterable[tuple[str, str]]) -> None:
        """The removals of *pairs* reached Redis."""
        with self._lock:
            self._clears.difference_update(pairs)

    @property
    def owes_releases(self) -> bool:
        return bool(self._orphans or self._clears)
