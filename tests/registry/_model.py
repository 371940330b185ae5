"""The seed's rules, written the straightforward way: the reference the registry and its
storages are checked against (an O(rows) eviction, exactly as the rules state it)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Model:
    """The seed's rules, written the straightforward way."""

    max_rows: int | None
    quota: int | None
    # scope -> key -> (age, reason), insertion-ordered (oldest first)
    rows: dict[str, dict[str, tuple[float, str | None]]] = field(default_factory=dict)
    dead: dict[tuple[str, str], int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(len(r) for r in self.rows.values())

    def counts(self) -> dict[str, int]:
        return {scope: len(r) for scope, r in self.rows.items() if r}

    def eviction_order(self) -> list[tuple[str, int]]:
        """Every scope with rows and its count, in the order the cap evicts them."""
        order = sorted(
            (scope for scope in self.rows if self.rows[scope]),
            key=lambda s: (-len(self.rows[s]), next(iter(self.rows[s].values()))[0]),
        )
        return [(scope, len(self.rows[scope])) for scope in order]

    def evict(self) -> None:
        assert self.max_rows is not None
        remaining = max(1, self.max_rows // 20)
        # Count per scope, sort: largest first, then oldest row first; delete a batch.
        for scope, _ in self.eviction_order():
            if remaining == 0:
                break
            for key in list(self.rows[scope])[:remaining]:
                del self.rows[scope][key]
                remaining -= 1

    def add(self, scope: str, key: str, reason: str | None, now: float) -> bool:
        """Apply a cancellation; False if the quota refuses it."""
        rows = self.rows.setdefault(scope, {})
        if key in rows:
            rows[key] = (rows[key][0], reason)
            return True
        if self.quota is not None and len(rows) >= self.quota:
            return False
        if self.max_rows is not None and self.total >= self.max_rows:
            self.evict()
        self.rows.setdefault(scope, {})[key] = (now, reason)
        return True

    def remove(self, scope: str, key: str) -> None:
        self.rows.get(scope, {}).pop(key, None)

    def expire(self, ttl: float, now: float) -> int:
        removed = 0
        for rows in self.rows.values():
            for key in [k for k, (age, _) in rows.items() if age < now - ttl]:
                del rows[key]
                removed += 1
        return removed
