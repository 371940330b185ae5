"""Rejected cancellations by scope and reason, as both bridges export them (private): a
Space-Saving summary of every rejection, and the stable selection of it that a scrape
exports (:mod:`._stable_top`)."""

from __future__ import annotations

from typing import Final

from ..scope import ScopeLabeler
from ._heavy_hitters import HeavyHitter, SpaceSaving
from ._stable_top import StableTop
from ._table_state import ITEM_SEPARATOR

__all__ = ["REJECTIONS_WINDOW", "Rejections"]

#: Seconds in which ``scope_rejections`` admits at most ``top_k`` new series.
REJECTIONS_WINDOW: Final = 120.0


class Rejections:
    """Counts each rejection under ``reason + ITEM_SEPARATOR + scope label``."""

    def __init__(self, top_k: int, capacity: int, labeler: ScopeLabeler) -> None:
        self.hitters = SpaceSaving(capacity)
        self.top = StableTop(top_k, REJECTIONS_WINDOW)
        self._labeler = labeler

    def add(self, scope: str, reason: str) -> None:
        self.hitters.add(reason + ITEM_SEPARATOR + self._labeler(scope))

    def select(self) -> list[HeavyHitter]:
        """What this collection exports (updates the selection)."""
        return self.top.select(*self.hitters.summary())
