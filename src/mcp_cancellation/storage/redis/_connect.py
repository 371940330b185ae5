"""How a Redis storage reaches its table: a client from a URL (one server behind a
blocking pool, or a cluster) and the table's identity (private)."""

from __future__ import annotations

import urllib.parse
from collections.abc import Collection
from typing import Any

from ..._errors import ConfigurationError
from ..._extras import requires
from ..._redaction import redact_url, scrub
from ._cluster import cluster_from_url, cluster_identity, is_cluster_url

with requires("redis", "RedisStorage"):
    from redis.asyncio import BlockingConnectionPool, Redis
    from redis.asyncio.cluster import RedisCluster
    from redis.asyncio.retry import Retry
    from redis.backoff import ExponentialBackoff, NoBackoff

__all__ = ["SCHEMES", "check_url", "client_from_url", "cluster_concurrency", "table_identity"]

#: Connections per cluster node beyond the calls a worker runs at once: the listener's
#: slot lookup and redis-py's script loads.
CLUSTER_HEADROOM = 8


def cluster_concurrency(client: RedisCluster) -> int:
    """How many calls a storage runs at once on *client*: its pool size, less the
    headroom kept for pub/sub and redirections. A cluster pool refuses a burst past its
    size instead of queueing it, so the storage queues it itself."""
    size = client.nodes_manager.connection_kwargs.get("max_connections", 100)
    return max(1, int(size) - CLUSTER_HEADROOM)


def client_from_url(
    url: str,
    *,
    socket_timeout: float,
    connect_timeout: float,
    timeout: float,
    retries: int,
    max_connections: int,
    cluster: bool | None,
    **client_kwargs: Any,
) -> Redis | RedisCluster:
    """The client for *url* (see
    :meth:`RedisStorage.from_url <mcp_cancellation.storage.redis.RedisStorage.from_url>`)."""
    if cluster or (cluster is None and is_cluster_url(url)):
        attempts = max(retries, int(timeout / 0.1))  # bounded by *timeout* anyway
        return cluster_from_url(
            url,
            socket_timeout=socket_timeout,
            socket_connect_timeout=connect_timeout,
            max_connections=max_connections + CLUSTER_HEADROOM,
            retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), attempts),
            decode_responses=False,
            **client_kwargs,
        )
    if is_cluster_url(url):
        raise ConfigurationError(f"{redact_url(url)!r} is a cluster URL but cluster=False")
    check_url(url)
    # A blocking pool: a burst waits for one of max_connections (within the timeout)
    # instead of opening connections without bound.
    try:
        pool = BlockingConnectionPool.from_url(
            url,
            max_connections=max_connections,
            timeout=timeout,
            socket_timeout=socket_timeout,
            socket_connect_timeout=connect_timeout,
            retry=Retry(NoBackoff(), retries),
            decode_responses=False,
            **client_kwargs,
        )
    except ValueError as exc:  # what redis-py says of a URL it cannot read
        raise ConfigurationError(
            scrub(f"not a usable Redis URL: {redact_url(url)!r} ({exc})", [url])
        ) from None
    return Redis.from_pool(pool)


#: The constructor's options (``from_url()`` gives any other to the client).
STORAGE_OPTIONS = frozenset(
    {
        "prefix",
        "timeout",
        "heartbeat_ttl",
        "cleanup_batch",
        "reconnect_backoff",
        "identity",
        "eviction_chunk",
        "max_wait",
        "track_delay",
        "operator",
    }
)
#: from_url()'s options that configure the client, with their defaults.
CLIENT_DEFAULTS: dict[str, Any] = {
    "socket_timeout": 2.0,
    "connect_timeout": 2.0,
    "retries": 1,
    "max_connections": 50,
    "cluster": None,
}


def connect(
    url: str, options: dict[str, Any], storage_options: Collection[str] = STORAGE_OPTIONS
) -> tuple[Redis | RedisCluster, dict[str, Any]]:
    """The client for *url* built from the client options among *options* (any option not
    in *storage_options* goes to redis-py), and the storage options left. The storage
    built from them owns the client, and closes it."""
    storage = {k: v for k, v in options.items() if k in storage_options}
    client_options = {**CLIENT_DEFAULTS}
    client_options.update((k, v) for k, v in options.items() if k not in storage_options)
    try:
        client = client_from_url(url, timeout=storage.get("timeout", 5.0), **client_options)
    except (ConfigurationError, ValueError, TypeError) as exc:
        # One boundary for every message a URL reaches (ours, redis-py's): no password,
        # and no chained exception that would print the URL in a traceback.
        raise ConfigurationError(scrub(exc, [url])) from None
    return client, storage


#: The URL schemes RedisStorage.from_url() accepts.
SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster")


def check_url(url: str) -> None:
    """Refuse, naming what is accepted, a URL redis-py would refuse with a bare
    ``ValueError`` or read wrongly (``redis://host/notanumber`` silently used database 0)."""
    scheme, sep, _ = url.partition("://")
    if not sep or scheme.lower() not in SCHEMES:
        accepted = ", ".join(f"{s}://" for s in SCHEMES)
        raise ConfigurationError(f"not a Redis URL: {redact_url(url)!r} (accepted: {accepted})")
    if scheme.lower() in ("redis", "rediss"):
        path = urllib.parse.urlsplit(url).path.strip("/")
        if path and not path.isdigit():
            raise ConfigurationError(
                f"the database in {redact_url(url)!r} must be a number "
                f"(redis://host:port/<db>), not {path!r}"
            )


def table_identity(client: Redis | RedisCluster, prefix: str) -> str:
    """Where the table lives, from the client's connection settings (no credentials)."""
    if isinstance(client, RedisCluster):
        return cluster_identity(client, prefix)
    pool = getattr(client, "connection_pool", None)
    kwargs: dict[str, Any] = getattr(pool, "connection_kwargs", None) or {}
    db = kwargs.get("db", 0)
    if kwargs.get("path"):
        return f"unix://{kwargs['path']}?db={db}&prefix={prefix}"
    host, port = kwargs.get("host", "localhost"), kwargs.get("port", 6379)
    if ":" in str(host):
        host = f"[{host}]"
    return f"redis://{host}:{port}/{db}?prefix={prefix}"
