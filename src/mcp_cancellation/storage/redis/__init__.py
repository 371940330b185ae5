"""Redis storage: one table shared by every worker and node, with pushed cancellations.

:class:`RedisStorage` keeps the registry's rows in Redis (or Valkey) with exactly the
semantics of :class:`~mcp_cancellation.MemoryStorage`:

* **One round trip, atomically.** :meth:`~RedisStorage.add` runs one Lua script that checks
  ``require_in_flight``, updates an existing row (never refused), applies the per-scope
  quota, evicts a full batch at the cap (largest scope first, oldest row first, spilling
  into the next) and inserts; ages come from the Redis server's clock, so workers with
  skewed clocks agree. The key layout and the cost of each step are described in
  :mod:`mcp_cancellation.storage.redis._scripts`.
* **Cluster-ready, shareable.** Every key starts with ``{<prefix>}:``; the braces are a
  hash tag, so all keys live in one slot of a Redis Cluster, and distinct prefixes let
  several apps (or tests) share one Redis.
* **Push, not poll.** Tokens of this worker's in-flight requests live in a local map. A
  cancellation recorded here flips them at once; one recorded by another worker is
  published by the script on this worker's channel (``{<prefix>}:c:<worker>``) and a
  background listener flips them. Tools therefore read ``cancelled()`` without any round
  trip. After the listener (re)subscribes, and whenever this worker's heartbeat is found
  missing (Redis restarted, or the worker was cut off beyond the TTL), the worker
  *resynchronises*: one script re-tracks its local in-flight rows and reports which of
  them were cancelled meanwhile, so a message lost during a disconnect is not a lost
  cancellation.
* **Owners across processes.** In-flight rows name their worker (the registry's instance
  id, given to :meth:`bind`). Each worker refreshes a heartbeat key
  (``heartbeat_ttl``, refreshed every third of it) from a background task; :meth:`cleanup`
  also removes the in-flight rows of workers whose heartbeat expired, so a worker killed
  with SIGKILL leaves nothing behind beyond the TTL plus one janitor interval.
* **Faults.** Every call is bounded by the socket timeouts and by ``timeout`` overall;
  every Redis error becomes :class:`~mcp_cancellation.StorageUnavailable`. A request
  waits for Redis at most ``max_wait`` as it starts and ends: its track and release are
  queued (batched, one script per moment) and retried with backoff until Redis takes
  them. Nothing needs a restart when Redis comes back; a lost table (its epoch key gone)
  is noticed by the next call and every worker resyncs.

The package is split by job: :mod:`._codec` (values on the wire), :mod:`._scripts` (the
key layout; the Lua scripts themselves are ``lua/*.lua``), :mod:`._connect` (a client
from a URL, the table's identity), :mod:`._cluster` (Redis Cluster: its URL and the
sharded subscription), :mod:`._home` (the home loop, bounds and error translation),
:mod:`._journal` (this worker's tokens and the writes it owes Redis, the resync),
:mod:`._push` (listener, heartbeat) and :mod:`.storage` (the operations).

:class:`PartitionedRedisStorage` splits the table by scope into several such tables whose
hash tags fall on different slot ranges, so that the masters of a Redis Cluster share the
load (:mod:`._partitioned`).

Background tasks (listener and heartbeat) start lazily at the first call and stop in
:meth:`aclose`. The storage belongs to one event loop, its *home*: the loop running when
it is constructed, or else the first loop that uses it. Calls made from another thread's
event loop are forwarded to the home loop (which must be running: otherwise they raise
:class:`~mcp_cancellation.StorageUnavailable` within the timeout), and :meth:`aclose`
must run on it. Build the storage where the application's loop runs (an ASGI lifespan,
``async def main``) or use it there first.
"""

from __future__ import annotations

from ._partitioned import PartitionedRedisStorage
from .storage import DEFAULT_PREFIX, RedisStorage

__all__ = ["DEFAULT_PREFIX", "PartitionedRedisStorage", "RedisStorage"]
