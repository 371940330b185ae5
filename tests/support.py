"""Real servers for tests: redis-server and uvicorn on free loopback ports.

Nothing here mocks: each helper starts the real program and waits until it answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar, Self

import pytest
import uvicorn

from mcp_cancellation import CancellationRegistry, RequestToken
from mcp_cancellation.storage import Storage, StorageStats

#: The storage matrix. Every leg that needs a Redis is marked: ``-m "not redis"`` leaves
#: memory alone.
BACKENDS = [
    "memory",
    pytest.param("redis", marks=pytest.mark.redis),
    pytest.param("redis-cluster", marks=[pytest.mark.redis, pytest.mark.cluster]),
    pytest.param("redis-partitioned", marks=[pytest.mark.redis, pytest.mark.cluster]),
]
#: The legs with one table, whose cap evicts across every scope (a partitioned table
#: applies its share of the cap in each partition: tests/storage/redis/test_partitioned.py).
ONE_TABLE = [leg for leg in BACKENDS if getattr(leg, "values", (leg,))[0] != "redis-partitioned"]
#: Runs a test on the one-table legs only.
one_table = pytest.mark.parametrize("backend", ONE_TABLE)


__all__ = [
    "MakeRegistry",
    "redis_url",
    "SteppedClock",
    "BACKENDS",
    "ONE_TABLE",
    "one_table",
    "RedisServer",
    "Registries",
    "stats_now",
    "ServerLog",
    "UvicornThread",
    "free_port",
    "server_log_tails",
    "wait_until",
]

#: Seconds the test servers keep an idle connection open (see UvicornThread).
KEEP_ALIVE = 30
#: How much of each server log a failed test shows.
LOG_TAIL_LINES = 80


#: ``make_registry``: builds registries on the test's backend (keyword arguments go to
#: :class:`CancellationRegistry`); each is closed after the test.
MakeRegistry = Callable[..., CancellationRegistry]


def redis_url(backend: str, request: pytest.FixtureRequest) -> str:
    """The URL of the session's server of a Redis *backend* (``redis``, ``redis-cluster``)."""
    if backend in ("redis-cluster", "redis-partitioned"):
        cluster: RedisClusterServers = request.getfixturevalue("redis_cluster")
        return cluster.url
    server: RedisServer = request.getfixturevalue("redis_server")
    return server.url


class SteppedClock:
    """``time.monotonic()`` plus what a test advanced it by: the memory storage's clock in
    the backend matrix, so that a test ages rows without waiting (a Redis table's clock
    is moved by :func:`advance_table_clock`)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds


async def advance_table_clock(storage: Storage, seconds: float) -> None:
    """Move the clock of a Redis *storage*'s table (of each partition's) *seconds* ahead:
    its scripts never let their time fall behind ``P clock``, so the rows written so far
    are *seconds* older to the TTL sweep, and later rows are written at the new time."""
    from mcp_cancellation.storage.redis import PartitionedRedisStorage, RedisStorage

    tables = storage.partitions if isinstance(storage, PartitionedRedisStorage) else [storage]
    for table in tables:
        assert isinstance(table, RedisStorage)
        key = table.key("clock")
        last = int(await table.client.get(key) or 0)
        now = max(last, time.time_ns() // 1000)  # the server's clock: this machine's
        await table.client.set(key, str(now + int(seconds * 1_000_000)))


class ServerLog:
    """The log file of a server a test started, shown (its tail) when the test fails.

    Servers register their log when they start; the ``pytest_runtest_makereport`` hook in
    ``tests/conftest.py`` attaches the tail of every log registered during a failed test
    (and of the session's own servers) to its report. :meth:`keep` reads the tail into
    memory for servers that delete their files when they stop.
    """

    #: Logs of servers started for the whole session, shown with every failure.
    session: ClassVar[list[ServerLog]] = []
    #: Logs registered by the test running now (cleared after its teardown).
    current: ClassVar[list[ServerLog]] = []

    def __init__(self, name: str, path: Path | str, *, session: bool = False) -> None:
        self.name = name
        self.path = Path(path)
        self.kept: str | None = None
        (ServerLog.session if session else ServerLog.current).append(self)

    def tail(self, lines: int = LOG_TAIL_LINES) -> str:
        if self.kept is not None:
            return self.kept
        try:
            text = self.path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            return f"(log unreadable: {exc})"
        rows = text.splitlines()
        shown = "\n".join(rows[-lines:])
        return shown if len(rows) <= lines else f"(last {lines} of {len(rows)} lines)\n{shown}"

    def keep(self) -> None:
        """Read the tail now (the file is about to be deleted)."""
        self.kept = None
        self.kept = self.tail()


def server_log_tails() -> list[tuple[str, str]]:
    """``(title, tail)`` of every server log of the current test and of the session."""
    logs = [*ServerLog.current, *ServerLog.session]
    return [(f"log of {log.name} ({log.path})", log.tail() or "(empty)") for log in logs]


class Registries:
    """Builds registries over storages from *make_storage* for one test, then closes them.

    ``registries(storage={...}, **limits)``: storage options go to *make_storage*, the rest
    to the registry. The janitor is off unless asked for, so tests decide when cleanup runs.
    """

    def __init__(self, make_storage: Callable[..., Storage]) -> None:
        self._make_storage = make_storage
        self.made: list[CancellationRegistry] = []

    def __call__(
        self, storage: dict[str, Any] | None = None, **kwargs: Any
    ) -> CancellationRegistry:
        kwargs.setdefault("janitor_interval", None)
        registry = CancellationRegistry(self._make_storage(**(storage or {})), **kwargs)
        self.made.append(registry)
        return registry

    async def aclose(self) -> None:
        for registry in self.made:
            await registry.aclose()


class HeldRequest:
    """A request served by its own task (``registry.request()``), held open until
    released: ``await started()`` gives its token, ``await finish()`` ends it; or use it
    as ``async with HeldRequest(...) as token:``."""

    def __init__(self, registry: CancellationRegistry, request_id: object, scope: str) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.token: RequestToken | None = None
        self.task = asyncio.create_task(self._serve(registry, request_id, scope))

    async def _serve(self, registry: CancellationRegistry, request_id: object, scope: str) -> None:
        async with registry.request(request_id, scope=scope) as token:
            self.token = token
            self.entered.set()
            await self.release.wait()

    async def started(self) -> RequestToken:
        await self.entered.wait()
        assert self.token is not None
        return self.token

    async def finish(self) -> None:
        self.release.set()
        await self.task

    async def __aenter__(self) -> RequestToken:
        return await asyncio.wait_for(self.started(), 15)

    async def __aexit__(self, *exc: object) -> None:
        self.release.set()
        await asyncio.wait_for(self.task, 15)


def stats_now(registry: CancellationRegistry) -> StorageStats:
    """The row counts of a registry whose storage answers without waiting (memory)."""
    stats = registry.storage.stats_from_thread(0)
    assert stats is not None, f"{registry.storage!r} cannot be read without waiting"
    return stats


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def free_cluster_port() -> int:
    """A free port *p* whose cluster bus port *p* + 10000 is free too (and below 65536)."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(20000, 30000)
        try:
            for candidate in (port, port + 10000):
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                    sock.bind(("127.0.0.1", candidate))
        except OSError:
            continue
        return port
    raise RuntimeError("no free pair of ports for a cluster node")


def wait_until(predicate: Any, timeout: float = 10.0, interval: float = 0.02) -> None:
    """Poll *predicate* until it is true; fail the test after *timeout* seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {predicate!r}")
        time.sleep(interval)


async def async_wait_until(predicate: Any, within: float = 10.0, interval: float = 0.02) -> None:
    """Async :func:`wait_until`; *predicate* may be sync or return an awaitable."""
    deadline = time.monotonic() + within
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {within}s: {predicate!r}")
        await asyncio.sleep(interval)


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """Terminate *process*, then kill it if it has not exited within 10 s; close its pipes."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - a hung shutdown
            process.kill()
            process.wait(timeout=10)
    for pipe in (process.stdin, process.stdout, process.stderr):
        if pipe is not None:
            pipe.close()


def start_on_free_port(
    spawn: Callable[[int], subprocess.Popen[bytes]],
    ready: Callable[[int], bool],
    log: ServerLog,
    *,
    timeout: float = 30,
) -> tuple[int, subprocess.Popen[bytes]]:
    """Start a server subprocess on a free port and wait until *ready* (or it exits).

    ``spawn(port)`` starts it; a port taken by another process between :func:`free_port`
    and the server's bind ("address already in use" in its log) is replaced by another.
    Any other early exit raises with the server's log. Whatever ends the wait early (its
    timeout, an interrupt) stops the server first.
    """
    for _ in range(5):
        port = free_port()
        process = spawn(port)
        try:
            wait_until(
                lambda process=process, port=port: process.poll() is not None or ready(port),
                timeout=timeout,
                interval=0.1,
            )
        except BaseException:
            # Not ready in time, or the suite stopped meanwhile (Ctrl-C, SIGTERM): the
            # caller never gets the process, so it must not outlive this call.
            stop_process(process)
            raise
        if process.poll() is None:
            return port, process
        if "address already in use" not in log.tail().lower():
            break
    raise RuntimeError(f"{log.name} exited at start:\n{log.tail()}")


class ServerContext:
    """A server as a context manager: :meth:`start` on entry, :meth:`close` on exit. A
    start that fails or is interrupted (not ready in time, Ctrl-C, SIGTERM) closes what it
    began before the error goes on, since no caller ever gets the server to close."""

    def start(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RedisServer(ServerContext):
    """A real ``redis-server`` on 127.0.0.1 and a free port, without persistence.

    :meth:`stop` and :meth:`start` may be called repeatedly (same port) to simulate an
    outage. Extra ``redis-server`` arguments go in *args*.
    """

    def __init__(
        self, *args: str, session: bool = False, pick_port: Callable[[], int] = free_port
    ) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed; run ./dev test to install it")
        self.binary = binary
        self._pick_port = pick_port
        self.port = pick_port()
        self.args = args
        self.dir = tempfile.mkdtemp(prefix="mcp-cancellation-redis-")
        self.log = ServerLog(
            f"redis-server :{self.port}", Path(self.dir) / "redis.log", session=session
        )
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start the server and wait for its "Ready to accept connections" log line.

        A port can be taken by another process between :func:`free_port` and the bind (two
        suites on one machine, or any outgoing connection's ephemeral port): the first start
        then picks another port. A restart keeps its port, as a real outage would.
        """
        if self.process is not None and self.process.poll() is None:
            return
        for _ in range(5):
            if self._spawn():
                self._started = True
                return
            if self._started or "Address already in use" not in self._new_log:
                break
            self.port = self._pick_port()
        raise RuntimeError(f"redis-server did not start:\n{self._new_log or self.log.tail()}")

    _started = False
    _new_log = ""

    #: redis-server processes started so far in this process (the marker check counts them).
    spawned = 0

    def _spawn(self) -> bool:
        """One start attempt; whether this process is now serving."""
        RedisServer.spawned += 1
        offset = self.log.path.stat().st_size if self.log.path.exists() else 0
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self.dir,
                "--protected-mode",
                "no",
                "--logfile",
                str(self.log.path),
                *self.args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        process = self.process

        def new_log() -> str:
            try:
                with self.log.path.open("rb") as handle:
                    handle.seek(offset)
                    self._new_log = handle.read().decode("utf-8", "replace")
            except OSError:
                self._new_log = ""
            return self._new_log

        # Ready once *this* process says so (the port answering could be someone else's).
        wait_until(
            lambda: "Ready to accept connections" in new_log() or process.poll() is not None,
            timeout=15,
        )
        if process.poll() is None:
            return True
        new_log()
        self.process = None
        return False

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process)
            self.process = None

    def kill(self) -> None:
        """SIGKILL the server, as a crash would (no shutdown, connections reset)."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)
            self.process = None

    def close(self) -> None:
        self.stop()
        self.log.keep()
        shutil.rmtree(self.dir, ignore_errors=True)


class RedisClusterServers(ServerContext):
    """A real Redis Cluster on 127.0.0.1: *masters* masters with *replicas* replicas each,
    every node a :class:`RedisServer` with ``--cluster-enabled yes``, joined by
    ``redis-cli --cluster create``. Ready when every node reports ``cluster_state:ok``
    and every replica's link to its master is up.

    :meth:`kill_master_of` SIGKILLs the master that serves a key and waits until a replica
    took its slots over, as a crash of that machine would.
    """

    #: Short, so that a failover takes a few seconds (the default is 15 s).
    NODE_TIMEOUT_MS = 1000

    def __init__(self, masters: int = 3, replicas: int = 1, *, session: bool = False) -> None:
        self.nodes = [
            RedisServer(
                *("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"),
                *("--cluster-node-timeout", str(self.NODE_TIMEOUT_MS)),
                session=session,
                pick_port=free_cluster_port,
            )
            for _ in range(masters * (1 + replicas))
        ]
        self.replicas = replicas
        self.create_log = ""

    @property
    def url(self) -> str:
        """The package's cluster URL: every node, comma-separated."""
        hosts = ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)
        return f"redis+cluster://{hosts}"

    @property
    def running(self) -> list[RedisServer]:
        return [node for node in self.nodes if node.process is not None]

    def start(self) -> None:
        for node in self.nodes:
            node.start()
        cli = shutil.which("redis-cli")
        if cli is None:
            raise RuntimeError("redis-cli is not installed; run ./dev test to install it")
        created = subprocess.run(
            [
                cli,
                "--cluster",
                "create",
                *(f"127.0.0.1:{node.port}" for node in self.nodes),
                "--cluster-replicas",
                str(self.replicas),
                "--cluster-yes",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        self.create_log = created.stdout + created.stderr
        if created.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed:\n{self.create_log}")
        self.wait_healthy()

    def info(self, node: RedisServer, *command: str) -> dict[str, str]:
        """``key:value`` lines of an INFO-like reply of *node* (``{}`` if it is down)."""
        from redis.client import Redis as SyncRedis
        from redis.exceptions import RedisError

        try:
            with SyncRedis(port=node.port, socket_timeout=2, decode_responses=True) as client:
                reply = client.execute_command(*command)
        except RedisError:
            return {}
        if isinstance(reply, dict):
            return {str(k): str(v) for k, v in reply.items()}
        lines = str(reply).splitlines()
        return dict(line.split(":", 1) for line in lines if ":" in line)

    def healthy(self) -> bool:
        for node in self.running:
            if self.info(node, "CLUSTER", "INFO").get("cluster_state") != "ok":
                return False
            replication = self.info(node, "INFO", "replication")
            if replication.get("role") == "slave" and (
                replication.get("master_link_status") != "up"
            ):
                return False
        return True

    def wait_healthy(self, timeout: float = 30) -> None:
        wait_until(self.healthy, timeout=timeout, interval=0.1)

    def master_of(self, key: bytes | str) -> RedisServer:
        """The running node that is master of *key*'s slot now."""
        from redis.client import Redis as SyncRedis
        from redis.crc import key_slot
        from redis.exceptions import RedisError

        slot = key_slot(key.encode() if isinstance(key, str) else key)
        for node in self.running:
            try:
                with SyncRedis(port=node.port, socket_timeout=2) as client:
                    ranges = client.execute_command("CLUSTER", "SLOTS")
            except RedisError:
                continue
            for start, end, master, *_ in ranges:
                if int(start) <= slot <= int(end):
                    port = int(master[1])
                    return next(n for n in self.nodes if n.port == port)
        raise AssertionError(f"no running node serves slot {slot}")

    def replica_of(self, master: RedisServer) -> RedisServer:
        """The running replica of *master*."""
        from redis.client import Redis as SyncRedis

        with SyncRedis(port=master.port, socket_timeout=2, decode_responses=True) as client:
            replicas = client.execute_command("ROLE")[2]
        port = int(replicas[0][1])
        return next(n for n in self.nodes if n.port == port)

    def kill_master_of(self, key: bytes | str, timeout: float = 30) -> RedisServer:
        """SIGKILL *key*'s master; return it once another node is master of the slot."""
        victim = self.master_of(key)
        victim.kill()
        wait_until(lambda: self._promoted(key, victim), timeout=timeout, interval=0.1)
        return victim

    def _promoted(self, key: bytes | str, victim: RedisServer) -> bool:
        try:
            return self.master_of(key) is not victim and self.healthy()
        except AssertionError:
            return False

    def restart(self, node: RedisServer) -> None:
        """Start a killed node again: it rejoins (as a replica) and the cluster heals."""
        node.start()
        self.wait_healthy()

    def close(self) -> None:
        for node in self.nodes:
            node.close()


class UvicornThread:
    """A real uvicorn server for *app* on 127.0.0.1, running in a background thread.

    The app runs on the thread's own event loop; tests talk to it over real sockets. The
    server stack is plain ``uvicorn``'s (asyncio and h11) unless ``loop``/``http`` say
    otherwise: with uvloop and httptools installed, uvicorn's ``auto`` would pick them, and
    which stack a test runs on must not depend on what else is installed.
    """

    def __init__(self, app: Any, *, port: int | None = None, **config: Any) -> None:
        # Bound here and handed to uvicorn: no other process can take the port between
        # choosing it and serving on it.
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind(("127.0.0.1", port or 0))
        self.port: int = self.socket.getsockname()[1]
        config.setdefault("log_level", "warning")
        config.setdefault("lifespan", "on")
        config.setdefault("loop", "asyncio")
        config.setdefault("http", "h11")
        # Longer than any test client keeps an idle connection (httpx: 5 s): with equal
        # timeouts a reused connection can be closed under the client, failing a request.
        config.setdefault("timeout_keep_alive", KEEP_ALIVE)
        self.config = uvicorn.Config(app, host="127.0.0.1", port=self.port, **config)
        self.server = uvicorn.Server(self.config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.socket]}, name=f"uvicorn-{self.port}"
        )
        self.thread.daemon = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.thread.start()
        wait_until(lambda: self.server.started or not self.thread.is_alive(), timeout=20)
        if not self.server.started:
            raise RuntimeError("uvicorn failed to start")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)
        if self.thread.is_alive():  # pragma: no cover - a hung shutdown
            self.server.force_exit = True
            self.thread.join(timeout=10)
        self.socket.close()

    def __enter__(self) -> UvicornThread:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _set_env(values: Mapping[str, str | None]) -> None:
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@contextlib.contextmanager
def env(**values: str | None) -> Iterator[None]:
    """Set (or, with ``None``, unset) environment variables for a block."""
    saved = {name: os.environ.get(name) for name in values}
    try:
        _set_env(values)
        yield
    finally:
        _set_env(saved)


def project_root() -> Path:
    return Path(__file__).resolve().parent.parent
