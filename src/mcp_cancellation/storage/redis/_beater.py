"""A worker's heartbeat, beaten from outside its interpreter (private).

:class:`~._liveness.Liveness` runs this file as a script, in a process of its own: a tool
that holds the interpreter lock (a long regular expression, ``sum(range(n))``, an
extension module's C call) stops every thread of its process, a heartbeat thread too,
but not another process. The beater reads its settings from standard input (pickled),
and beats with ``BEAT`` every *interval* while its parent lives and is not stopped: it
reads the parent's state from ``/proc`` every ``CHECK`` seconds, beats at once when a
stopped parent runs again (its beat may have lapsed), and exits when the parent is gone.
It writes one line per beat to standard output: ``0`` lived, ``1`` lapsed, ``2`` none,
``e`` failed (Redis did not answer). Where no process can be had it runs as a thread
of the worker's own (:class:`Beater` with no parent).

This file imports only the standard library and redis, so that it starts fast and never
imports the application.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["Beater", "Recipe", "connect", "parent_state"]

#: How often a beater looks at its parent's state (seconds).
CHECK = 0.25

#: How to build a blocking client: ``("redis", connection class name, kwargs)`` or
#: ``("cluster", [(host, port), ...], kwargs)``.
Recipe = tuple[str, Any, dict[str, Any]]


def connect(recipe: Recipe, timeout: float) -> Any:
    """A blocking client built from *recipe*, each command bounded by *timeout*."""
    kind, where, kwargs = recipe
    bounds: dict[str, Any] = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
    if kind == "cluster":
        from redis.cluster import ClusterNode, RedisCluster

        node: Any = ClusterNode
        nodes = [node(host, port) for host, port in where]
        return RedisCluster(startup_nodes=nodes, **kwargs, **bounds)
    from redis import connection
    from redis.client import Redis

    pool = connection.ConnectionPool(
        connection_class=getattr(connection, where), max_connections=2, **kwargs, **bounds
    )
    return Redis(connection_pool=pool)


def parent_state(pid: int) -> str:
    """The state letter of process *pid* (``/proc/<pid>/stat``: ``R``, ``S``, ``T`` for
    stopped, …), ``""`` when it is gone, ``"?"`` when it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except FileNotFoundError:
        return ""
    except OSError:
        return "?"
    return stat[stat.rfind(b")") + 2 :][:1].decode("ascii", "replace")


class Beater:
    """Beats with the ``BEAT`` script of *settings* every *interval* seconds, reporting
    each reply (or ``e``) to *report*, until *stop* is set or the *parent* (a pid, or
    ``None`` for a thread of the worker itself) is gone."""

    def __init__(
        self,
        settings: dict[str, Any],
        report: Callable[[str], None],
        stop: threading.Event,
        parent: int | None = None,
    ) -> None:
        self._settings = settings
        self._report = report
        self._stop = stop
        self._parent = parent

    def run(self) -> None:
        settings = self._settings
        interval: float = settings["interval"]
        client: Any = None
        script: Any = None
        due = 0.0
        stopped = False  # whether the parent was seen stopped since the last beat
        try:
            while not self._stop.is_set():
                if self._parent is not None:
                    state = parent_state(self._parent)
                    if state in ("", "Z", "X") or os.getppid() != self._parent:
                        return  # the worker is gone: its heartbeat lapses
                    if state in ("T", "t"):  # stopped (SIGSTOP, a debugger): no beat
                        stopped = True
                        self._stop.wait(CHECK)
                        continue
                    if stopped:  # running again: beat now, it may have lapsed
                        stopped, due = False, 0.0
                now = time.monotonic()
                if now < due:
                    self._stop.wait(min(CHECK, due - now) if self._parent else due - now)
                    continue
                due = now + interval
                try:
                    if client is None:
                        client = connect(settings["recipe"], settings["timeout"])
                        script = client.register_script(settings["source"])
                    reply = script(keys=settings["keys"], args=settings["args"])
                except Exception:  # Redis down: the loop's calls report it
                    if client is not None:
                        with contextlib.suppress(Exception):
                            client.close()
                    client = None
                    self._report("e")
                else:
                    self._report(str(int(reply)))
        finally:
            if client is not None:
                with contextlib.suppress(Exception):
                    client.close()


def _main() -> None:
    settings = pickle.load(sys.stdin.buffer)
    out = sys.stdout

    def report(line: str) -> None:
        out.write(line + "\n")
        out.flush()

    with contextlib.suppress(BrokenPipeError, KeyboardInterrupt):
        Beater(settings, report, threading.Event(), settings["parent"]).run()


if __name__ == "__main__":
    _main()
