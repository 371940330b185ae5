"""One Redis table as every module of the Redis storage takes it (private): the prefix,
each key name spelled once, the home loop and the scripts.

The key names are those of docs/architecture.md, "The Redis table" and "Tasks"; the Lua
side spells them once too (``lua/rows.lua``, ``lua/owners.lua``, ``lua/tasks.lua``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ._codec import member, to_bytes

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from redis.asyncio.cluster import RedisCluster

    from ._home import HomeLoop
    from ._scripts import Scripts

__all__ = ["Keys", "Table"]


def table_prefix(prefix: str) -> bytes:
    """``P``: ``{<prefix>}:``, whose braces are the Redis Cluster hash tag of every key."""
    return to_bytes("{" + prefix + "}:")


@dataclasses.dataclass(frozen=True, slots=True)
class Keys:
    """The key and channel names of one table, under its prefix ``P``."""

    prefix: bytes

    def key(self, *parts: str | bytes) -> bytes:
        """``P`` followed by *parts*."""
        return self.prefix + b"".join(to_bytes(part) for part in parts)

    # -- rows and the scope index ----------------------------------------------------------

    @property
    def scopes(self) -> bytes:
        """``P scopes``: scope -> rows (also every script's routing key, ``KEYS[1]``)."""
        return self.prefix + b"scopes"

    @property
    def reasons(self) -> bytes:
        """``P reasons``: each row's encoded reason, ``*`` before it while pending."""
        return self.prefix + b"reasons"

    @property
    def owners_by_scope(self) -> bytes:
        """``P fs``: scope -> owners in flight."""
        return self.prefix + b"fs"

    @property
    def epoch(self) -> bytes:
        return self.prefix + b"epoch"

    @property
    def layout(self) -> bytes:
        return self.prefix + b"layout"

    # -- owners ----------------------------------------------------------------------------

    def flight(self, scope: str, key: str) -> bytes:
        """``P f:<m>``: the request's owners and their tracks."""
        return self.prefix + b"f:" + member(scope, key)

    def flight_of(self, m: bytes) -> bytes:
        """``P f:<m>`` of a member already framed."""
        return self.prefix + b"f:" + m

    def marks_of(self, m: bytes) -> bytes:
        """``P fw:<m>``: the request's mark and each worker's count of its owners."""
        return self.prefix + b"fw:" + m

    @property
    def workers(self) -> bytes:
        """``P workers``: the workers whose heartbeat lives."""
        return self.prefix + b"workers"

    def owners_of(self, worker: str | bytes) -> bytes:
        """``P w:<worker>``: the worker's owners."""
        return self.prefix + b"w:" + to_bytes(worker)

    def heartbeat(self, worker: str | bytes) -> bytes:
        """``P hb:<worker>``: the worker's heartbeat (the table's time of its last beat)."""
        return self.prefix + b"hb:" + to_bytes(worker)

    @property
    def pulse(self) -> bytes:
        """``P pulse``: the table's clock for liveness (lua/liveness.lua)."""
        return self.prefix + b"pulse"

    # -- channels --------------------------------------------------------------------------

    def pushes(self, worker: str) -> bytes:
        """``P c:<worker>``: cancellations and answers pushed to the worker."""
        return self.prefix + b"c:" + to_bytes(worker)

    @property
    def resyncs(self) -> bytes:
        """``P resync``: a new epoch, or ``recovering``."""
        return self.prefix + b"resync"

    @property
    def seeks(self) -> bytes:
        """``P seek``: the seeks of young calls."""
        return self.prefix + b"seek"

    # -- tasks -----------------------------------------------------------------------------

    @property
    def tasks(self) -> bytes:
        """``P tasks``: every task by expiry."""
        return self.prefix + b"tasks"

    def task(self, m: bytes) -> bytes:
        """``P task:<m>``: one task's record."""
        return self.prefix + b"task:" + m


@dataclasses.dataclass(frozen=True, eq=False, slots=True)
class Table:
    """One table: its client, :class:`Keys`, home loop and scripts. Every call of the
    Redis storage's modules goes through :meth:`run` or :attr:`home`."""

    client: Redis | RedisCluster
    keys: Keys
    home: HomeLoop
    scripts: Scripts

    async def run(self, name: str, argv: Sequence[bytes | str], operation: str = "") -> Any:
        """One script, on the home loop, bounded and translated; a failure is reported
        as *operation* (default: the script's name)."""
        call = functools.partial(self.scripts.run, name, argv)
        return await self.home.call(call, operation or name.lower())
