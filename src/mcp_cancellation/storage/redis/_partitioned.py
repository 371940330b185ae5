"""``PartitionedRedisStorage``: the table split by scope across the masters of a cluster.

Each partition is a whole :class:`RedisStorage` under its own prefix, whose hash tag is
chosen so that partition *i* lives in the *i*-th equal range of the 16 384 hash slots (the
ranges ``redis-cli --cluster create`` gives N masters). A scope always maps to the same
partition (CRC-32 of its name), so its quota is checked atomically, as on one table.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import heapq
import zlib
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Self, TypeVar

from ..._errors import ConfigurationError, StorageUnavailable
from ..._extras import requires
from .._base import AddResult, InFlightRequest, Limits, Storage, StorageStats, TableSummary
from .._task_table import Claim, Created, TaskRecord, TaskTable
from ._connect import connect, table_identity
from ._layout import check_layout, partition_prefixes
from ._storage import DEFAULT_PREFIX, RedisStorage

with requires("redis", "PartitionedRedisStorage"):
    from redis.asyncio import Redis
    from redis.asyncio.cluster import RedisCluster

if TYPE_CHECKING:
    from ..._token import RequestToken

__all__ = ["PartitionedRedisStorage"]


#: A partition that could not be read: its index, its prefix and the error.
Unreadable = tuple[int, str, StorageUnavailable]
T = TypeVar("T")


async def read_partitions(
    partitions: Sequence[RedisStorage],
    read: Callable[[RedisStorage], Awaitable[list[T]]],
) -> tuple[list[T], tuple[Unreadable, ...]]:
    """*read* every partition at once: what those that answered hold, and those that could
    not be read (a master stalled or down). Raises only when none could be read."""
    results = await asyncio.gather(*(read(p) for p in partitions), return_exceptions=True)
    found: list[T] = []
    unreadable: list[Unreadable] = []
    for index, (part, result) in enumerate(zip(partitions, results, strict=True)):
        if isinstance(result, StorageUnavailable):
            unreadable.append((index, part.prefix, result))
        elif isinstance(result, BaseException):
            raise result
        else:
            found += result
    if partitions and len(unreadable) == len(partitions):
        raise unreadable[0][2]
    return found, tuple(unreadable)


class PartitionedRedisStorage(Storage):
    """A :class:`RedisStorage` table split by scope into *partitions* tables, so that the
    masters of a Redis Cluster share the load (one partition per master is the usual
    choice).

    A scope lives in one partition, so its quota is exact. The cap is split: partition *i*
    holds at most ``max_rows // partitions`` rows (the remainder goes one row each to the
    first partitions, at least one row each), and evicts, when full, from its own largest
    scopes first, oldest rows first. The cap evicts, never refuses, so a caller under its
    quota is always served, as with one table. Every other option is
    :class:`RedisStorage`'s, applied to each partition; all partitions share *client*.
    """

    name = "redis"

    def __init__(
        self,
        client: Redis | RedisCluster,
        *,
        partitions: int,
        prefix: str = DEFAULT_PREFIX,
        identity: str | None = None,
        **options: Any,
    ) -> None:
        if partitions < 1:
            raise ConfigurationError("partitions must be >= 1")
        self.prefix = prefix
        self._client = client
        self._close_client = False  # from_url's own client: closed by aclose()
        self._identity = identity if identity is not None else table_identity(client, prefix)
        self.partitions: tuple[RedisStorage, ...] = tuple(
            RedisStorage(client, prefix=part, identity=self._identity, **options)
            for part in partition_prefixes(prefix, partitions)
        )
        for index, part in enumerate(self.partitions):
            part._health.sender = self  # their failures are this storage's, for the bridges
            part.partition = (index, partitions)
        self._limits: dict[Limits, tuple[Limits, ...]] = {}
        self._tasks = PartitionedTaskTable(self.partitions, self.partition_of)
        self._unreadable: tuple[Unreadable, ...] = ()

    @property
    def unreadable(self) -> tuple[Unreadable, ...]:
        """The partitions that the last :meth:`in_flight_requests` or the last listing of
        :attr:`task_table` could not read: ``(index, prefix, error)`` each, by index."""
        found = {u[0]: u for u in (*self._tasks.unreadable, *self._unreadable)}
        return tuple(found[index] for index in sorted(found))

    @classmethod
    def from_url(cls, url: str, *, partitions: int, **options: Any) -> Self:
        """Connect as :meth:`RedisStorage.from_url` does (the same URLs and options)."""
        client, storage_options = connect(url, options)
        storage = cls(client, partitions=partitions, **storage_options)
        storage._close_client = True
        return storage

    @property
    def identity(self) -> str:
        return self._identity

    @property
    def available(self) -> bool:
        """Whether every partition's last write was taken."""
        return all(part.available for part in self.partitions)

    @property
    def client(self) -> Redis | RedisCluster:
        return self._client

    def bind(self, instance_id: str) -> None:
        for part in self.partitions:
            part.bind(instance_id)

    @property
    def task_table(self) -> PartitionedTaskTable:
        """The tasks of every partition: a task lives in its scope's partition."""
        return self._tasks

    def partition_of(self, scope: str) -> RedisStorage:
        """The partition that holds *scope*'s rows."""
        return self.partitions[self._index_of(scope)]

    def _index_of(self, scope: str) -> int:
        return zlib.crc32(scope.encode()) % len(self.partitions)

    def __repr__(self) -> str:
        return f"<PartitionedRedisStorage prefix={self.prefix!r} partitions={len(self.partitions)}>"

    def _split(self, limits: Limits) -> tuple[Limits, ...]:
        """Each partition's share of the cap."""
        shares = self._limits.get(limits)
        if shares is None:
            n = len(self.partitions)
            if limits.max_rows is None:
                shares = (limits,) * n
            else:
                base, extra = divmod(limits.max_rows, n)
                shares = tuple(
                    dataclasses.replace(limits, max_rows=max(1, base + (i < extra)))
                    for i in range(n)
                )
            self._limits[limits] = shares
        return shares

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
        index = self._index_of(scope)
        share = self._split(limits)[index]
        return await self.partitions[index].add(
            scope,
            key,
            reason,
            limits=share,
            require_in_flight=require_in_flight,
            operator=operator,
            track_wait=track_wait,
        )

    async def get(self, scope: str, key: str) -> tuple[bool, str | None]:
        return await self.partition_of(scope).get(scope, key)

    async def remove(self, scope: str, key: str) -> bool:
        return await self.partition_of(scope).remove(scope, key)

    async def track(self, scope: str, key: str, owner: str, token: RequestToken) -> None:
        await self.partition_of(scope).track(scope, key, owner, token)

    async def untrack(self, scope: str, key: str, owner: str) -> None:
        await self.partition_of(scope).untrack(scope, key, owner)

    async def finish(self, scope: str, key: str, owner: str) -> None:
        await self.partition_of(scope).finish(scope, key, owner)

    async def in_flight_requests(self) -> list[InFlightRequest]:
        """The requests in flight in every partition that answers: one that cannot be read
        (its master stalled or down) is left out and named in :attr:`unreadable`; only when
        none can be read does this raise."""
        found, self._unreadable = await read_partitions(
            self.partitions, lambda part: part.in_flight_requests()
        )
        return found

    async def check_table(self) -> None:
        """As :meth:`RedisStorage.check_table`, for this prefix and partition count."""
        check = functools.partial(check_layout, self._client, self.prefix, len(self.partitions))
        await self.partitions[0].table.home.call(check, "stats")

    async def is_tracked(self, scope: str, key: str) -> bool:
        return await self.partition_of(scope).is_tracked(scope, key)

    async def cleanup(self, ttl: float | None, dead_owners: Collection[str]) -> tuple[int, int]:
        done = await asyncio.gather(*(p.cleanup(ttl, dead_owners) for p in self.partitions))
        return sum(rows for rows, _ in done), sum(flights for _, flights in done)

    async def stats(self) -> StorageStats:
        parts = await asyncio.gather(*(p.stats() for p in self.partitions))
        rows: dict[str, int] = {}
        in_flight: dict[str, int] = {}
        for stats in parts:
            rows.update(stats.rows)
            in_flight.update(stats.in_flight)
        return StorageStats(rows=rows, in_flight=in_flight)

    async def summary(self, top_k: int, at_least: int | None = None) -> TableSummary:
        parts = await asyncio.gather(*(p.summary(top_k, at_least) for p in self.partitions))
        return _merge(parts, top_k)

    def stats_from_thread(self, timeout: float) -> StorageStats | None:
        return self.partitions[0].table.home.from_thread(self.stats, timeout)

    def summary_from_thread(
        self, top_k: int, timeout: float, at_least: int | None = None
    ) -> TableSummary | None:
        return self.partitions[0].table.home.from_thread(
            lambda: self.summary(top_k, at_least), timeout
        )

    async def resync(self) -> int:
        """Resync every partition (:meth:`RedisStorage.resync`); the tokens flipped."""
        return sum(await asyncio.gather(*(p.resync() for p in self.partitions)))

    async def ping(self) -> None:
        await self.partitions[0].ping()

    async def aclose(self) -> None:
        for part in self.partitions:
            await part.aclose()
        if self._close_client:
            with contextlib.suppress(Exception):  # a client that is already gone
                await self._client.aclose()


def _merge(parts: Collection[TableSummary], top_k: int) -> TableSummary:
    """One summary of disjoint partitions: totals added, the largest scopes merged."""
    rows: dict[str, int] = {}
    in_flight: dict[str, int] = {}
    running: dict[str, int] = {}
    for part in parts:
        for counts, added in (
            (rows, part.rows),
            (in_flight, part.in_flight),
            (running, part.tasks_running),
        ):
            for name, n in added.items():
                counts[name] = counts.get(name, 0) + n
    largest = heapq.nsmallest(
        top_k, (item for part in parts for item in part.largest), key=lambda kv: -kv[1]
    )
    return TableSummary(
        rows=rows,
        in_flight=in_flight,
        largest=tuple(largest),
        at_least=sum(part.at_least for part in parts),
        tasks_running=running,
    )


class PartitionedTaskTable(TaskTable):
    """The task tables of a partitioned table's partitions, each task in its scope's."""

    shared = True
    #: The partitions the last :meth:`tasks` could not read.
    unreadable: tuple[Unreadable, ...] = ()

    def __init__(
        self, partitions: Sequence[RedisStorage], partition_of: Callable[[str], RedisStorage]
    ) -> None:
        super().__init__()
        self._partitions = partitions
        self._of = partition_of

    async def create(self, record: TaskRecord, quota: int | None, max_tasks: int | None) -> Created:
        # The table's bound is split evenly: each partition holds its share.
        share = None if max_tasks is None else max(1, -(-max_tasks // len(self._partitions)))
        return await self._of(record.scope).task_table.create(record, quota, share)

    async def get(self, scope: str, task_id: str, orphan_error: str) -> TaskRecord | None:
        return await self._of(scope).task_table.get(scope, task_id, orphan_error)

    async def write(self, scope: str, task_id: str, fields: Mapping[str, str]) -> bool:
        return await self._of(scope).task_table.write(scope, task_id, fields)

    async def answer(self, scope: str, task_id: str, answers: Mapping[str, str]) -> bool:
        return await self._of(scope).task_table.answer(scope, task_id, answers)

    async def claim(self, record: TaskRecord) -> Claim:
        return await self._of(record.scope).task_table.claim(record)

    async def reap(self, orphan_error: str) -> list[TaskRecord]:
        """The dead workers' tasks of every partition that answers."""
        found, _ = await read_partitions(
            self._partitions, lambda part: part.task_table.reap(orphan_error)
        )
        return found

    def watch(self, scope: str, task_id: str) -> contextlib.AbstractContextManager[asyncio.Event]:
        return self._of(scope).task_table.watch(scope, task_id)

    def on_resync(self, listener: Callable[[], None]) -> None:
        for part in self._partitions:
            part.task_table.on_resync(listener)

    async def tasks(self) -> list[TaskRecord]:
        """The tasks of every partition that answers; one that cannot be read is left out
        and named in :attr:`unreadable` (and in the storage's); only when none can be read
        does this raise."""
        found, self.unreadable = await read_partitions(
            self._partitions, lambda part: part.task_table.tasks()
        )
        return found
