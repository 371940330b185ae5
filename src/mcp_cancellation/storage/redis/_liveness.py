"""This worker's heartbeat, kept by a thread of its own (private).

The heartbeat says "this process lives": a thread with its own connection beats while
the process runs, whatever its event loop does (a tool that blocks it, CPU work, a long
garbage collection), so a busy worker is never taken for dead. Only a process that
stops (SIGKILL, a crash) or is frozen (SIGSTOP, a paused VM) lets it lapse. A frozen
process that comes back finds its heartbeat gone at its next beat: others may have acted
on its silence (swept its rows, failed its tasks), so it resyncs at once
(docs/architecture.md, "A worker's own state").
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

from ..._extras import requires

with requires("redis", "RedisStorage"):
    from redis.asyncio import Redis
    from redis.asyncio.cluster import RedisCluster
    from redis.client import Redis as SyncRedis
    from redis.cluster import ClusterNode
    from redis.cluster import RedisCluster as SyncCluster
    from redis.connection import (
        Connection,
        ConnectionPool,
        SSLConnection,
        UnixDomainSocketConnection,
    )
    from redis.exceptions import RedisClusterException, RedisError

__all__ = ["Liveness", "sync_twin"]

logger = logging.getLogger("mcp_cancellation.redis")

#: The connection settings a thread's client copies from the storage's (those that say
#: where the server is and how to log in; never the async client's own objects).
_COPIED = (
    "host",
    "port",
    "db",
    "username",
    "password",
    "path",
    "credential_provider",
    "ssl_keyfile",
    "ssl_certfile",
    "ssl_cert_reqs",
    "ssl_ca_certs",
    "ssl_ca_data",
    "ssl_ca_path",
    "ssl_check_hostname",
    "ssl_password",
    "ssl_min_version",
    "ssl_ciphers",
)
_CLASSES: dict[str, type[Connection] | type[UnixDomainSocketConnection]] = {
    "Connection": Connection,
    "SSLConnection": SSLConnection,
    "UnixDomainSocketConnection": UnixDomainSocketConnection,
}


def sync_twin(client: Redis | RedisCluster, timeout: float) -> SyncRedis | SyncCluster:
    """A blocking client to the server (or cluster) *client* reaches, with the same
    credentials and TLS settings, each command bounded by *timeout*."""
    bounds: dict[str, Any] = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
    if isinstance(client, RedisCluster):
        manager: Any = client.nodes_manager
        kwargs = {k: v for k, v in manager.connection_kwargs.items() if k in _COPIED}
        kwargs.pop("host", None)
        kwargs.pop("port", None)
        node_class: Any = ClusterNode
        nodes = [
            node_class(node.host, node.port)
            for node in list(manager.startup_nodes.values()) or client.get_nodes()
        ]
        ssl = getattr(manager, "connection_kwargs", {}).get("connection_class")
        if ssl is not None and ssl.__name__ == "SSLConnection":
            kwargs["ssl"] = True
        return SyncCluster(startup_nodes=nodes, **kwargs, **bounds)
    pool: Any = client.connection_pool
    kwargs = {k: v for k, v in pool.connection_kwargs.items() if k in _COPIED}
    connection_class = _CLASSES.get(pool.connection_class.__name__, Connection)
    sync_pool = ConnectionPool(
        connection_class=connection_class, max_connections=2, **kwargs, **bounds
    )
    return SyncRedis(connection_pool=sync_pool)


class Liveness:
    """Beats *key* (``SET key 1 PX ttl GET``) every *interval* seconds from a daemon
    thread; calls *lapsed* (from that thread) when a beat finds the key gone after an
    earlier beat set it."""

    def __init__(
        self,
        connect: Callable[[], SyncRedis | SyncCluster],
        key: bytes,
        ttl_ms: int,
        interval: float,
        lapsed: Callable[[], None],
    ) -> None:
        self._connect = connect
        self._key = key
        self._ttl_ms = ttl_ms
        self._interval = interval
        self._lapsed = lapsed
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Beats Redis took (for tests and health checks).
        self.beats = 0

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, name: str) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=name, daemon=True)
            self._thread.start()

    def stop(self, within: float = 5.0) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(within)

    def _run(self) -> None:
        client = None
        beaten = False  # whether an earlier beat set the key (a missing key is then a lapse)
        try:
            while not self._stop.is_set():
                try:
                    if client is None:
                        client = self._connect()
                    before = client.set(self._key, b"1", px=self._ttl_ms, get=True)
                except Exception as exc:  # Redis down: the loop's calls report it
                    if not isinstance(exc, RedisError | RedisClusterException | OSError):
                        logger.warning("heartbeat not written: %r", exc)
                    logger.debug("heartbeat not written: %s", exc)
                    if client is not None:
                        with contextlib.suppress(Exception):
                            client.close()
                    client = None
                else:
                    self.beats += 1
                    if before is None and beaten:
                        self._lapsed()
                    beaten = True
                self._stop.wait(self._interval)
        finally:
            if client is not None:
                with contextlib.suppress(Exception):
                    client.close()
