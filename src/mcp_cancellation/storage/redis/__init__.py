"""Redis storage: one table shared by every worker and node, with pushed cancellations.

:class:`RedisStorage` keeps the registry's rows in Redis (or Valkey, or a Redis Cluster)
with exactly the semantics of :class:`~mcp_cancellation.MemoryStorage`; a cancellation
recorded by any worker is pushed to the worker that runs the request, and tools read
``cancelled()`` without a round trip. :class:`PartitionedRedisStorage` splits the table
by scope across a cluster's masters.

The protocol (every key, a worker's own state, every event and the invariant it keeps) is
docs/architecture.md, "The Redis table"; the modules use its names. By job: ``_codec``
(values on the wire), ``_contracts`` (each script's arguments and reply), ``_scripts``
(loading ``lua/*.lua``), ``_connect`` and ``_cluster`` (a client from a URL), ``_layout``
(partition prefixes; the operator tools' table check), ``_home`` (the home loop, bounds,
error translation), ``_journal`` (this worker's tokens and the writes it owes Redis),
``_push`` (listener, heartbeat), ``storage`` (the operations), ``_partitioned``.

The storage belongs to one event loop, its *home*: the loop running when it is
constructed, or else the first loop that uses it. Calls made from another thread's event
loop are forwarded to the home loop (which must be running: otherwise they raise
:class:`~mcp_cancellation.StorageUnavailable` within the timeout), and :meth:`aclose`
must run on it. Build the storage where the application's loop runs (an ASGI lifespan,
``async def main``) or use it there first.
"""

from __future__ import annotations

from ._partitioned import PartitionedRedisStorage
from ._storage import RedisStorage

__all__ = [
    "PartitionedRedisStorage",
    "RedisStorage",
]
