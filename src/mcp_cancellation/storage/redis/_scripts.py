"""Lua scripts of :class:`~mcp_cancellation.storage.redis.RedisStorage` (private).

The scripts are package data, one file each in ``lua/`` (``add.lua``, ``track.lua``, ...),
each starting with its ARGV and its reply; ``lua/prelude.lua`` holds what they share (key
names, the row codec, the row operations) and is prepended to each.

Every key lives under one prefix ``{name}:`` whose braces are a Redis Cluster hash tag, so
all of them hash to one slot and every script below is atomic on a cluster too. Each script
is called with ``KEYS[1]`` set to the prefix's ``scopes`` key (so a cluster client routes it
to the right node) and ``ARGV[1]`` set to the prefix itself; the other key names are built
from the prefix inside the script.

Layout (``P`` is the prefix, ``m`` a row's *member* ``<#scope>:<scope><key>``, which is
unambiguous for any bytes since the scope's byte length comes first):

=====================  ======  ============================================================
``P ages``             ZSET    every cancellation row: ``m`` -> age; TTL sweeps and the
                               global row count (``ZCARD``) come from here
``P reasons``          HASH    ``m`` -> ``-`` (no reason) or ``+<reason>``, after a ``*``
                               while the row is pending (recorded with nothing in flight);
                               a field exists exactly when the row exists
``P s:<scope>``        ZSET    the scope's rows: ``key`` -> age (oldest first)
``P scopes``           ZSET    ``scope`` -> row count (quota check, largest scope, stats)
``P l:<n>``            ZSET    the scopes holding exactly ``n`` rows: ``scope`` -> age of
                               its oldest row (the eviction tie-break)
``P kinds``            HASH    scope kind -> row count (scrapes), and ``_v`` once the
                               counts are kept (a table from 0.1.0 is counted once)
``P clock``            STRING  last age handed out (ages strictly increase)
``P f:<m>``            HASH    in-flight owners of a request: ``owner`` -> worker id, and
                               ``!<owner>`` -> encoded reason once that owner is cancelled
``P fs``               HASH    ``scope`` -> in-flight row count (stats)
``P info``             HASH    ``<#m>:<m><owner>`` -> start (ms), worker and tool of an
                               in-flight row, tab-separated (for operators)
``P w:<worker>``       SET     the worker's in-flight rows: ``<#m>:<m><owner>``
``P workers``          SET     workers seen (each ``SYNC`` adds its own; the cleanup removes
                               those whose heartbeat lapsed)
``P hb:<worker>``      STRING  the worker's heartbeat, with a TTL
``P epoch``            STRING  the table's epoch, written at its first use: gone with the
                               table (flush, restart, failover to an empty replica)
``P lost``             STRING  set for a grace period once a worker finds the table lost
``P c:<worker>``       (pub/sub channel) cancellations of the worker's requests
``P resync``           (pub/sub channel) every worker resynchronises (table lost)
=====================  ======  ============================================================

Ages are microseconds of the Redis server's clock (``TIME``), made strictly increasing
through ``P clock`` so rows keep their insertion order exactly as the memory storage does,
whatever the workers' clocks say; the TTL sweep reads the same clock (never behind
``P clock``, as after a failover to a node whose clock is behind). Eviction picks the
largest scope from ``P scopes``, then the scope of that size whose oldest row is oldest
from ``P l:<n>``: each step costs
O(log n) and touches only the rows it evicts, never a scan of every row. Scopes that go
whole are deleted in bulk: those of the largest size come off the front of ``P l:<n>``
(one read of each victim's rows, then one command per 1 000 deletes), and when only
one-row scopes are left, their rows are the front of ``P ages`` itself. One call of
``ADD`` evicts at most a bounded number of rows (``RedisStorage(eviction_chunk=...)``); a
larger batch is finished by further calls, so no script blocks Redis for long. The TTL
sweep (``CLEANUP``) deletes the expired prefix of ``P ages`` in one command, scopes that
expire whole in bulk, and re-files the others with grouped commands, ``cleanup_batch``
rows per call. A scrape (``SUMMARY``) reads the largest scopes the same way and the totals
by kind from ``P kinds``: O(k log n).

Messages published on ``P c:<worker>`` are netstrings (``<len>:<bytes>`` concatenated):
scope, key, encoded reason, then the ids of that worker's owners that track the request.
"""

from __future__ import annotations

import functools
from importlib import resources

__all__ = ["NAMES", "source"]

#: The scripts, by the name the storage calls them with.
NAMES = ("ADD", "REMOVE", "SYNC", "SUMMARY", "CLEANUP")


@functools.cache
def _read(name: str) -> str:
    return resources.files(__package__).joinpath("lua", f"{name}.lua").read_text("utf-8")


def source(name: str, *, sharded: bool = False) -> str:
    """The text of script *name* (one of :data:`NAMES`), the prelude first; with *sharded*
    (a cluster), pushes use ``SPUBLISH``, so a message stays within the table's shard (the
    channel shares the keys' hash tag)."""
    if name not in NAMES:
        raise KeyError(name)
    text = _read("prelude") + _read(name.lower())
    return text.replace("redis.call('PUBLISH'", "redis.call('SPUBLISH'") if sharded else text
