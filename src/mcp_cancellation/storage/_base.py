"""The storage interface: where cancellation and in-flight rows live.

A storage holds two tables and applies the registry's rules to them atomically:

* cancellation rows ``(scope, key) -> (age, reason)``, bounded by a per-scope quota that
  rejects and a global cap that evicts (:meth:`Storage.add`);
* in-flight rows ``(scope, key, owner) -> token``, one per request owner, through which a
  recorded cancellation flips the owner's :class:`~mcp_cancellation.RequestToken`.

Request ids arrive here already validated and normalised to their row key (``str``). Every
backend keeps the same semantics; the registry's test suite runs against each. Backends
translate their own errors into :class:`~mcp_cancellation.StorageUnavailable` at this
boundary.
"""

from __future__ import annotations

import abc
import heapq
import os
import socket
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Literal

from ..scope import scope_kind

if TYPE_CHECKING:
    from .._token import RequestToken
    from ._task_table import TaskTable

__all__ = [
    "STORAGE_OPERATIONS",
    "AddOutcome",
    "AddResult",
    "InFlightRequest",
    "Limits",
    "RECORDED",
    "Storage",
    "StorageStats",
    "TableSummary",
    "UPDATED",
]

_HOST: Final = socket.gethostname()

AddOutcome = Literal["recorded", "updated", "not_in_flight", "quota"]

#: The ``operation`` a failed storage call reports (``storage.error`` signal, the
#: ``mcp_cancellation_storage_errors_total`` counter): the contract's methods, and the
#: background work of a shared storage (``heartbeat``, ``subscribe``, ``resync``).
STORAGE_OPERATIONS: Final = (
    "add",
    "get",
    "remove",
    "track",
    "untrack",
    "finish",
    "is_tracked",
    "cleanup",
    "stats",
    "resync",
    "heartbeat",
    "subscribe",
    "task",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """The bounds a storage enforces on insert. ``None`` disables a bound."""

    max_rows: int | None = 10_000
    max_rows_per_scope: int | None = 256
    #: Shadow mode: an insert past the quota is recorded anyway and reported as
    #: :attr:`AddResult.over_quota` (what enforcing would have refused), so that a quota
    #: can be rolled out without refusing anyone.
    shadow_quota: bool = False

    @property
    def eviction_batch(self) -> int:
        """Rows evicted at once when the cap is reached: ``max(1, max_rows // 20)``."""
        return max(1, (self.max_rows or 0) // 20)


@dataclass(frozen=True, slots=True)
class AddResult:
    """What :meth:`Storage.add` did.

    ``evicted`` lists ``(scope, count)`` for each scope the cap evicted rows from,
    in eviction order.
    """

    outcome: AddOutcome
    evicted: tuple[tuple[str, int], ...] = ()
    #: Recorded although the scope was at its quota (only with ``Limits.shadow_quota``).
    over_quota: bool = False
    #: The evicted rows by scope kind, if the storage knows them without working each
    #: scope's kind out (the memory storage's index holds them); else ``None``, and the
    #: registry adds them up when a receiver asks (``cancellation.evicted_batch``). Left
    #: out of comparisons: it restates ``evicted``, and is optional.
    evicted_kinds: Mapping[str, int] | None = field(default=None, compare=False)


#: The plain results of :meth:`Storage.add` (nothing evicted, within the quota), which a
#: storage may share instead of building its own.
RECORDED: Final = AddResult("recorded")
UPDATED: Final = AddResult("updated")


@dataclass(frozen=True, slots=True, kw_only=True)
class InFlightRequest:
    """One request in flight, as an operator sees it (:meth:`Storage.in_flight_requests`).
    Times are Unix seconds; ``worker`` is the registry instance id of the process that
    runs it."""

    scope: str
    request_id: str
    worker: str
    tool: str | None
    started: float
    cancelled: bool
    reason: str | None = None
    #: Whether its worker is alive (a shared storage's heartbeat): a dead worker's call
    #: cannot be stopped, and its row goes with the next cleanup.
    alive: bool = True


@dataclass(frozen=True, slots=True)
class StorageStats:
    """Row counts per scope, as read at one moment (for gauges and operators)."""

    rows: Mapping[str, int] = field(default_factory=dict)
    in_flight: Mapping[str, int] = field(default_factory=dict)

    @property
    def total_rows(self) -> int:
        return sum(self.rows.values())

    @property
    def total_in_flight(self) -> int:
        return sum(self.in_flight.values())


@dataclass(frozen=True, slots=True)
class TableSummary:
    """What a scrape reads (the table-state gauges): row totals by scope kind and the
    largest scopes, from the storage's incrementally kept scope-size index. Reading it
    costs O(k log n) for the *k* largest scopes, never a scan of the cancellation table.
    """

    #: Cancellation rows by scope kind (``global``, ``session``, ``principal``, ``ip``,
    #: ``other``); kinds without rows may be absent.
    rows: Mapping[str, int] = field(default_factory=dict)
    #: In-flight rows by scope kind (bounded by the requests running right now).
    in_flight: Mapping[str, int] = field(default_factory=dict)
    #: The largest scopes and their row counts, in eviction order: largest first, equal
    #: sizes oldest row first (the scopes the cap would evict first).
    largest: tuple[tuple[str, int], ...] = ()
    #: How many scopes hold at least the ``at_least`` rows the summary was asked about
    #: (0 when it was not): the scopes near their quota, from the same index.
    at_least: int = 0
    #: The tasks whose tool runs now, in the whole table, by tool (the task table's count,
    #: kept as tasks start and end).
    tasks_running: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, stats: StorageStats, top_k: int, at_least: int | None = None) -> TableSummary:
        """A summary computed from full :class:`StorageStats` (a scan: for storages that
        keep no index). Equal sizes go by scope name, as row ages are not in the stats."""
        return cls(
            rows=_by_kind(stats.rows),
            in_flight=_by_kind(stats.in_flight),
            largest=tuple(
                heapq.nsmallest(top_k, stats.rows.items(), key=lambda kv: (-kv[1], kv[0]))
            ),
            at_least=(
                0 if at_least is None else sum(1 for n in stats.rows.values() if n >= at_least)
            ),
        )


def _by_kind(counts: Mapping[str, int]) -> dict[str, int]:
    by_kind: dict[str, int] = {}
    for scope, n in counts.items():
        kind = scope_kind(scope)
        by_kind[kind] = by_kind.get(kind, 0) + n
    return by_kind


class Storage(abc.ABC):
    """Backend for :class:`~mcp_cancellation.CancellationRegistry`: everything the registry,
    its request contexts and the telemetry bridges may ask of a storage.

    Implementations must be safe to call from several threads, each running its own
    event loop, and must keep each method atomic with respect to the others.

    **Stats and summaries.** :meth:`stats` reads row counts per scope: a full read, for
    operators and tests. :meth:`summary` reads what a scrape needs (totals by scope kind
    and the *k* largest scopes) from an index the storage keeps as rows come and go, so
    its cost does not grow with the table. The ``*_from_thread`` forms serve collectors
    that run on a thread of their own and cannot await. A storage that keeps no index
    inherits summaries computed from :meth:`stats`.

    **Identity and health.** :attr:`identity` names the table the storage holds, the same
    in every process that shares it (the ``storage`` label of the table-state gauges, so
    dashboards count a shared table once). :attr:`available` says whether the storage's
    last call was answered; a storage that can fail sends
    :data:`~mcp_cancellation.signals.storage_error` for each failed operation.
    """

    #: Short name used in logs and benchmarks.
    name: str = "storage"

    @property
    def identity(self) -> str:
        """The table this storage holds: here, this process's own
        (``<name>://<host>/<pid>``). Shared storages derive it from where the table lives
        (never from a credential)."""
        return f"{self.name}://{_HOST}/{os.getpid()}"

    @property
    def available(self) -> bool:
        """Whether the storage answered its last call (always, for one in this process)."""
        return True

    def bind(self, instance_id: str) -> None:  # noqa: B027 - optional hook
        """Called once by the registry with its unique instance id (owner ids start with
        it). Storages shared between processes use it to name this worker."""

    @abc.abstractmethod
    async def add(
        self,
        scope: str,
        key: str,
        reason: str | None,
        *,
        limits: Limits,
        require_in_flight: bool = False,
        operator: bool = False,
        track_wait: float = 0.0,
    ) -> AddResult:
        """Record a cancellation, atomically: with *require_in_flight*, only if some owner
        tracks ``(scope, key)``; then the quota (existing rows are updated, never refused);
        then the cap, evicting a full batch before inserting. Tokens of owners that track
        ``(scope, key)`` are flipped, in this process and (for shared storages) in others;
        with *operator*, each flipped token reports it as an operator's cancellation (the
        worker whose call it stops counts it: :meth:`RequestToken._cancel`).

        With *require_in_flight* and nothing in flight, the cancellation *waits*
        *track_wait* seconds for a track of ``(scope, key)`` (one whose write was still on
        its way, its worker's loop busy): every owner tracked meanwhile is cancelled
        (``recorded``), and the waiting cancellation is gone before this returns
        (``not_in_flight`` if nothing claimed it), so it never touches a later request.
        While it waits it counts against the scope's quota, as a row does."""

    @abc.abstractmethod
    async def get(self, scope: str, key: str) -> tuple[bool, str | None]:
        """``(present, reason)`` of a cancellation row."""

    @abc.abstractmethod
    async def remove(self, scope: str, key: str) -> bool:
        """Delete a cancellation row, reading first so that an absent row costs no write."""

    @abc.abstractmethod
    async def track(self, scope: str, key: str, owner: str, token: RequestToken) -> None:
        """Add the in-flight row of *owner*; flip *token* at once if a cancellation row for
        ``(scope, key)`` already exists. Tracking again under the same owner replaces."""

    @abc.abstractmethod
    async def untrack(self, scope: str, key: str, owner: str) -> None:
        """Remove *owner*'s in-flight row only; other owners of the same id keep theirs."""

    async def finish(self, scope: str, key: str, owner: str) -> None:
        """End a request: untrack *owner*, then remove the cancellation row. Backends may
        do both in one round trip."""
        await self.untrack(scope, key, owner)
        await self.remove(scope, key)

    @abc.abstractmethod
    async def is_tracked(self, scope: str, key: str) -> bool:
        """Whether any owner has ``(scope, key)`` in flight."""

    @abc.abstractmethod
    async def cleanup(self, ttl: float | None, dead_owners: Collection[str]) -> tuple[int, int]:
        """Remove cancellation rows older than *ttl* seconds (none when ``None``) and the
        in-flight rows of *dead_owners* (plus, for shared storages, those of workers whose
        heartbeat expired). Returns ``(removed, in_flight_removed)``."""

    @abc.abstractmethod
    async def stats(self) -> StorageStats:
        """Row counts per scope."""

    def stats_from_thread(self, timeout: float) -> StorageStats | None:
        """Row counts per scope for a caller that cannot await (a metrics exporter's own
        thread), within *timeout* seconds: an in-process storage reads them at once, a
        storage behind a server on its own event loop. ``None`` when they cannot be read
        in time, or when waiting would block the storage's own loop (the default: a
        storage that does not implement it)."""
        return None

    async def summary(self, top_k: int, at_least: int | None = None) -> TableSummary:
        """Row totals by scope kind, the *top_k* largest scopes and, with *at_least*, how
        many scopes hold at least that many rows (see :class:`TableSummary`)."""
        return TableSummary.of(await self.stats(), top_k, at_least)

    def summary_from_thread(
        self, top_k: int, timeout: float, at_least: int | None = None
    ) -> TableSummary | None:
        """:meth:`summary` for a caller that cannot await, as :meth:`stats_from_thread`."""
        stats = self.stats_from_thread(timeout)
        return None if stats is None else TableSummary.of(stats, top_k, at_least)

    @abc.abstractmethod
    async def in_flight_requests(self) -> list[InFlightRequest]:
        """Every request in flight in this table, in every process that shares it (for
        operators: a read of the whole in-flight table)."""

    @property
    def task_table(self) -> TaskTable:
        """Where this storage keeps tasks (:mod:`mcp_cancellation.tasks`), shared as its
        rows are. A storage that keeps none raises :class:`NotImplementedError`."""
        raise NotImplementedError(f"{type(self).__name__} keeps no tasks")

    async def ping(self) -> None:  # noqa: B027 - optional hook
        """Check that the storage answers; raise
        :class:`~mcp_cancellation.StorageUnavailable` if it does not (and report it as a
        storage that can fail does). The middleware calls it at start-up, so that a storage
        that is down is reported then, not at the first request. In-process storages
        always answer."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release connections and background tasks."""
