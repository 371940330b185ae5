"""The Lua scripts of :class:`~mcp_cancellation.storage.redis.RedisStorage`, loaded from
``lua/<name>.lua`` (private).

Each script's file starts with its KEYS, ARGV and reply (encoded and decoded by
:mod:`._contracts`); each carries only the libraries it uses, prepended in order:
``lua/base.lua`` (every script: the prefix, the member framing, the sigils, the heartbeat
key and the clock), ``lua/rows.lua`` (the row scripts: the rows, the scope index,
eviction), ``lua/owners.lua`` (the scripts that track, release or cancel: recovery, the
epoch, seeks, owners, marks, waiting cancellations) and ``lua/tasks.lua`` (the task
scripts). The keys, and why the scripts may build their names from ``P`` alone, are
described in docs/architecture.md, "The Redis table".
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from importlib import resources
from typing import Any

from ..._extras import requires

with requires("redis", "RedisStorage"):
    from redis.asyncio import Redis
    from redis.asyncio.cluster import RedisCluster
    from redis.exceptions import NoScriptError

__all__ = ["NAMES", "Scripts", "source"]

#: The scripts, by the name the storage calls them with.
NAMES = (
    "ADD",
    "WITHDRAW",
    "REMOVE",
    "SYNC",
    "SUMMARY",
    "CLEANUP",
    "TASK_CREATE",
    "TASK_GET",
    "TASK_WRITE",
    "TASK_ANSWER",
    "TASK_CLAIM",
    "TASK_REAP",
    "BEAT",
)


#: The libraries each script is built from, before its own file (see the module docstring).
LIBRARIES: dict[str, tuple[str, ...]] = {
    "REMOVE": ("base", "rows"),
    "SUMMARY": ("base", "rows"),
    "ADD": ("base", "rows", "owners"),
    "WITHDRAW": ("base", "rows", "owners"),
    **dict.fromkeys(("SYNC", "CLEANUP"), ("base", "liveness", "rows", "owners")),
    **{name: ("base", "tasks") for name in NAMES if name.startswith("TASK_")},
    **dict.fromkeys(("TASK_GET", "TASK_REAP"), ("base", "liveness", "tasks")),
    "BEAT": ("base", "liveness"),
}


@functools.cache
def _read(name: str) -> str:
    return resources.files(__package__).joinpath("lua", f"{name}.lua").read_text("utf-8")


def source(name: str, *, sharded: bool = False) -> str:
    """The text of script *name* (one of :data:`NAMES`): its :data:`LIBRARIES`, then its
    own file (defining functions a script does not use is most of a small script's
    cost); with *sharded* (a cluster), pushes use ``SPUBLISH``, so a message stays within
    the table's shard (the channel shares the keys' hash tag)."""
    if name not in NAMES:
        raise KeyError(name)
    text = "".join(_read(library) for library in (*LIBRARIES[name], name.lower()))
    return text.replace("redis.call('PUBLISH'", "redis.call('SPUBLISH'") if sharded else text


class Scripts:
    """The scripts of one table, run on the node that holds it: ``EVALSHA``, and on
    ``NOSCRIPT`` ``EVAL`` with the text, which leaves it in that node's cache. (redis-py's
    own loader sends a script to every primary, so one paused master would stall a cold
    start of every partition; and a replica just promoted may have missed it.)"""

    def __init__(self, client: Redis | RedisCluster, routing_key: bytes, *, sharded: bool) -> None:
        self._client = client
        self._keys = (routing_key,)
        self._sources = {name: source(name, sharded=sharded) for name in NAMES}
        self._shas = {
            name: hashlib.sha1(text.encode("utf-8")).hexdigest()
            for name, text in self._sources.items()
        }

    async def run(self, name: str, argv: Sequence[bytes | str]) -> Any:
        """Script *name* with *argv* (its contract's encoding, the prefix first)."""
        try:
            return await self._client.evalsha(self._shas[name], 1, *self._keys, *argv)
        except NoScriptError:
            return await self._client.eval(self._sources[name], 1, *self._keys, *argv)
