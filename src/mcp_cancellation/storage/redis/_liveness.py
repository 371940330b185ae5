"""This worker's heartbeat, beaten from outside its event loop and its interpreter lock
(private).

The heartbeat says "this process lives": a beater beats while the process runs, whatever
its event loop does (a tool that blocks it, CPU work, a long garbage collection) and
whatever holds its interpreter lock (one long C call), so a busy worker is never taken
for dead. The beater is a small process of its own (``_beater.py``) that watches its
parent: it stops beating while the worker is stopped (SIGSTOP, a paused VM) and exits
when it is gone (SIGKILL, a crash). Where no such process can be had (no ``/proc``, or
settings that cannot be handed to one) it is a thread of the worker, which a held
interpreter lock stops too. A frozen process that comes back finds its heartbeat lapsed
at its next beat: others may have acted on its silence (swept its rows, failed its
tasks), so it resyncs at once (docs/architecture.md, "A worker's own state").
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from typing import IO, Any

from ..._extras import requires
from . import _beater
from ._beater import Beater, Recipe

with requires("redis", "RedisStorage"):
    from redis.asyncio import Redis
    from redis.asyncio.cluster import RedisCluster

__all__ = ["Liveness", "twin_recipe"]

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
_CLASSES = ("Connection", "SSLConnection", "UnixDomainSocketConnection")


def twin_recipe(client: Redis | RedisCluster) -> Recipe:
    """How to build a blocking client to the server (or cluster) *client* reaches, with
    the same credentials and TLS settings (:func:`._beater.connect` builds it)."""
    if isinstance(client, RedisCluster):
        manager: Any = client.nodes_manager
        kwargs = {k: v for k, v in manager.connection_kwargs.items() if k in _COPIED}
        kwargs.pop("host", None)
        kwargs.pop("port", None)
        nodes = [
            (node.host, node.port)
            for node in list(manager.startup_nodes.values()) or client.get_nodes()
        ]
        ssl = getattr(manager, "connection_kwargs", {}).get("connection_class")
        if ssl is not None and ssl.__name__ == "SSLConnection":
            kwargs["ssl"] = True
        return ("cluster", nodes, kwargs)
    pool: Any = client.connection_pool
    kwargs = {k: v for k, v in pool.connection_kwargs.items() if k in _COPIED}
    name = pool.connection_class.__name__
    return ("redis", name if name in _CLASSES else "Connection", kwargs)


class Liveness:
    """Beats this worker's heartbeat (``BEAT`` with *keys* and *args*) every *interval*
    seconds from a beater process (or, where none can be had, a daemon thread); calls
    *lapsed* (from a thread) when a beat finds that an earlier one had lapsed, or that
    the heartbeat is gone after an earlier beat set it."""

    def __init__(
        self,
        recipe: Recipe,
        source: str,
        keys: Sequence[bytes],
        args: Sequence[bytes | str],
        interval: float,
        timeout: float,
        lapsed: Callable[[], None],
    ) -> None:
        self._settings: dict[str, Any] = {
            "recipe": recipe,
            "source": source,
            "keys": list(keys),
            "args": list(args),
            "interval": interval,
            "timeout": timeout,
            "parent": os.getpid(),
        }
        self._lapsed = lapsed
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._beaten = False  # whether a beat set the heartbeat (its absence is then a lapse)
        #: Beats Redis took (for tests and health checks).
        self.beats = 0
        #: ``"process"`` or ``"thread"``: what beats (for tests and health checks).
        self.beater = ""

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, name: str) -> None:
        if self._thread is not None:
            return
        try:
            self._process = self._spawn()
        except Exception as exc:  # no /proc, settings no process can take, no fork
            logger.info("heartbeat beaten by a thread (no beater process: %s)", exc)
            self._process = None
        if self._process is not None:
            self.beater = "process"
            target: Callable[[], None] = self._read
        else:
            self.beater = "thread"
            target = Beater(self._settings, self._heard, self._stop).run
        self._thread = threading.Thread(target=target, name=name, daemon=True)
        self._thread.start()

    def stop(self, within: float = 5.0) -> None:
        self._stop.set()
        process, self._process = self._process, None
        if process is not None:
            with contextlib.suppress(Exception):
                process.terminate()
                process.wait(within)
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(within)

    def _spawn(self) -> subprocess.Popen[bytes]:
        if _beater.parent_state(os.getpid()) in ("", "?"):
            raise OSError("this system has no /proc to watch the worker from")
        if getattr(sys, "frozen", False):  # (sys.executable is the application itself)
            raise OSError("a frozen application has no Python interpreter to run a beater")
        settings = pickle.dumps(self._settings)
        process = subprocess.Popen(
            [sys.executable, _beater.__file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            close_fds=True,
        )
        assert process.stdin is not None
        process.stdin.write(settings)
        process.stdin.close()
        return process

    def _read(self) -> None:
        """The beater process's reports, until it ends; a beater that ends while the
        worker goes on is replaced by a thread."""
        process = self._process
        assert process is not None
        stream: IO[bytes] | None = process.stdout
        assert stream is not None
        with stream:
            for line in stream:
                self._heard(line.strip().decode("ascii", "replace"))
        if process.poll() is None:
            with contextlib.suppress(Exception):
                process.wait(5.0)
        if not self._stop.is_set():
            logger.warning("the heartbeat's beater process ended: a thread beats instead")
            self.beater = "thread"
            Beater(self._settings, self._heard, self._stop).run()

    def _heard(self, report: str) -> None:
        """One beat's outcome: ``0`` lived, ``1`` lapsed, ``2`` none, ``e`` failed."""
        if report == "e":
            logger.debug("heartbeat not written")
            return
        self.beats += 1
        if report == "1" or (report == "2" and self._beaten):
            self._lapsed()
        self._beaten = True
