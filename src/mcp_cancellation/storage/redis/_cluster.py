"""Redis Cluster support of the Redis storage: the cluster URL, the table's identity on a
cluster, and the sharded pub/sub subscription of one worker (private).

On a cluster every key of a table shares one hash tag, so one slot (one shard: a master and
its replicas) holds the whole table and every script runs there atomically. Pushed
cancellations use sharded pub/sub (``SPUBLISH`` in the scripts, ``SSUBSCRIBE`` here, Redis
>= 7): a message travels only within the table's shard instead of being broadcast to every
node, and the subscription is held on a connection to the slot's current master, found
again after every failover or slot move.

redis-py's asyncio ``RedisCluster`` routes the scripts by their first key. Its own
``ClusterPubSub`` is not used: a plain connection to the slot's master, subscribed with
``PubSub.ssubscribe`` (asyncio, redis-py >= 8.0), is all the listener needs, and it
already reconnects and resynchronises after any loss.

redis-py 8.0 and 8.1 send a call made before the client has its slot map to any node; a
burst of such calls (the first ``EVALSHA`` of every request at start-up) draws MOVED
replies, and after five of them the client closes all its connections, those of the
calls in flight too, which then fail with an ``AttributeError``. The storage therefore
awaits the client's ``initialize()`` before each call (at once when the map is there).
"""

from __future__ import annotations

import importlib.metadata
import urllib.parse
from typing import TYPE_CHECKING, Any, cast

from ..._errors import ConfigurationError
from ..._extras import requires
from ..._redaction import redact_url

with requires("redis", "RedisStorage"):
    from redis.asyncio import ConnectionPool, Redis
    from redis.asyncio.cluster import ClusterNode, RedisCluster

if TYPE_CHECKING:
    from redis.asyncio.client import PubSub

__all__ = [
    "CLUSTER_SCHEMES",
    "ShardSubscription",
    "cluster_client_supported",
    "cluster_identity",
    "is_cluster",
    "is_cluster_url",
    "cluster_from_url",
]

#: URL schemes that mean "a Redis Cluster": the plain scheme plus ``+cluster``.
CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}


def is_cluster(client: object) -> bool:
    """Whether *client* is redis-py's asyncio cluster client, which then must be redis-py
    8.0 or later (asyncio sharded pub/sub)."""
    if not isinstance(client, RedisCluster):
        return False
    found = importlib.metadata.version("redis")
    if not cluster_client_supported(found):
        raise ConfigurationError(
            f"a Redis Cluster needs redis-py >= 8.0 (asyncio sharded pub/sub); found "
            f"{found}: pip install 'redis>=8.0'"
        )
    return True


def cluster_client_supported(version: str) -> bool:
    """Whether redis-py *version* (``"8.1.0"``) has a cluster client the storage can use."""
    parts = []
    for part in version.split(".")[:2]:
        digits = "".join(ch for ch in part if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts) >= (8, 0)


def is_cluster_url(url: str) -> bool:
    """Whether *url*'s scheme asks for a cluster (``<scheme>+cluster://``)."""
    return url.split("://", 1)[0].lower().endswith("+cluster")


def _split_nodes(netloc: str) -> tuple[str, list[tuple[str, int]]]:
    """``user:pass@h1:p1,h2:p2`` -> (``user:pass@``, [(h1, p1), (h2, p2)])."""
    auth, _, hosts = netloc.rpartition("@")
    nodes: list[tuple[str, int]] = []
    for part in hosts.split(","):
        part = part.strip()
        if not part:
            continue
        parsed = urllib.parse.urlsplit("//" + part)
        if parsed.hostname is None:
            raise ConfigurationError(f"not a host[:port] in a cluster URL: {part!r}")
        nodes.append((parsed.hostname, parsed.port or 6379))
    if not nodes:
        raise ConfigurationError("a cluster URL names at least one node")
    return (auth + "@" if auth else ""), nodes


def cluster_from_url(url: str, **options: Any) -> RedisCluster:
    """An asyncio ``RedisCluster`` for ``redis+cluster://[user:pass@]h1:p1[,h2:p2...]``
    (``rediss+cluster://`` for TLS; a plain ``redis://`` URL when asked for a cluster
    explicitly). Every listed node is a startup node, so the client finds the cluster as
    long as one of them answers. *options* go to ``RedisCluster``."""
    scheme, _, rest = url.partition("://")
    scheme = CLUSTER_SCHEMES.get(scheme.lower(), scheme.lower())
    if scheme not in ("redis", "rediss"):
        raise ConfigurationError(
            f"not a Redis Cluster URL (redis+cluster://...): {redact_url(url)!r}"
        )
    netloc, _, tail = rest.partition("/")
    auth, nodes = _split_nodes(netloc)
    database = tail.split("?", 1)[0]
    if database not in ("", "0"):
        raise ConfigurationError("a Redis Cluster has only database 0")
    query = tail.partition("?")[2]
    (host, port), others = nodes[0], nodes[1:]
    first = f"{scheme}://{auth}{_netloc(host, port)}/0" + (f"?{query}" if query else "")
    startup = [ClusterNode(h, p) for h, p in others]
    return RedisCluster.from_url(first, startup_nodes=startup or None, **options)


def _netloc(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def cluster_identity(client: RedisCluster, prefix: str) -> str:
    """``redis+cluster://<startup nodes, sorted>?prefix=<prefix>``: the same in every
    process that lists the same nodes (pass ``identity=`` when they list different ones)."""
    names = sorted(
        _netloc(str(node.host), int(node.port)) for node in client.get_nodes() or []
    ) or sorted(_netloc(str(n.host), int(n.port)) for n in getattr(client, "startup_nodes", []))
    return f"redis+cluster://{','.join(names)}?prefix={prefix}"


class ShardSubscription:
    """One worker's ``SSUBSCRIBE`` on the master that serves its channel's slot.

    :meth:`open` asks the cluster client where the slot lives (a routed command first, so
    that a client whose map predates a failover learns the new one), then subscribes on
    a connection of its own to that node. A ``sunsubscribe`` from the server (the slot
    moved) or a lost connection ends the subscription; the listener then opens a new one.
    """

    confirmation = "ssubscribe"
    message = "smessage"
    #: The server dropped the subscription (slot migrated): reconnect.
    lost: str | None = "sunsubscribe"

    def __init__(self, client: RedisCluster, routing_key: bytes) -> None:
        self._client = client
        self._routing_key = routing_key
        self._node_client: Redis | None = None
        self.node = ""

    async def open(self, *channels: bytes) -> PubSub:
        await self._client.exists(self._routing_key)  # refreshes a stale slot map
        # (The channels share the table's hash tag: one slot, one node.)
        node = self._client.get_node_from_key(cast(str, channels[0]))  # (bytes work too)
        if node is None:  # pragma: no cover - redis-py raises SlotNotCoveredError
            raise ConnectionError("no node serves the table's slot")
        kwargs = dict(node.connection_kwargs)
        kwargs.pop("event_dispatcher", None)
        pool = ConnectionPool(connection_class=node.connection_class, **kwargs)
        self._node_client = Redis.from_pool(pool)
        self.node = node.name
        pubsub = self._node_client.pubsub()
        await pubsub.ssubscribe(*channels)
        return pubsub

    async def close(self) -> None:
        client, self._node_client = self._node_client, None
        if client is not None:
            await client.aclose()
