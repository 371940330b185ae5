"""The Lua scripts of :class:`~mcp_cancellation.storage.redis.RedisStorage`, loaded from
``lua/<name>.lua`` (private).

Each script's file starts with its KEYS, ARGV and reply (encoded and decoded by
:mod:`._contracts`); ``lua/prelude.lua``, prepended to each, holds what they share: key
names, the row codec, the row and scope-index operations, the track and its claims. The
keys, and why the scripts may build their names from ``P`` alone, are described in
docs/architecture.md, "The Redis table".
"""

from __future__ import annotations

import functools
from importlib import resources

__all__ = ["NAMES", "source"]

#: The scripts, by the name the storage calls them with.
NAMES = ("ADD", "WITHDRAW", "REMOVE", "SYNC", "SUMMARY", "CLEANUP")


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
