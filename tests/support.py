"""Real servers for tests: redis-server and uvicorn on free loopback ports.

Nothing here mocks: each helper starts the real program and waits until it answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import uvicorn

__all__ = ["RedisServer", "UvicornThread", "free_port", "wait_until"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


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


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


class RedisServer:
    """A real ``redis-server`` on 127.0.0.1 and a free port, without persistence.

    :meth:`stop` and :meth:`start` may be called repeatedly (same port) to simulate an
    outage. Extra ``redis-server`` arguments go in *args*.
    """

    def __init__(self, *args: str) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed; run ./dev test to install it")
        self.binary = binary
        self.port = free_port()
        self.args = args
        self.dir = tempfile.mkdtemp(prefix="mcp-cancellation-redis-")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        if self.process is not None and self.process.poll() is None:
            return
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
                *self.args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until(lambda: _port_open(self.port), timeout=15)

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class UvicornThread:
    """A real uvicorn server for *app* on 127.0.0.1, running in a background thread.

    The app runs on the thread's own event loop; tests talk to it over real sockets.
    """

    def __init__(self, app: Any, *, port: int | None = None, **config: Any) -> None:
        self.port = port or free_port()
        config.setdefault("log_level", "warning")
        config.setdefault("lifespan", "on")
        self.config = uvicorn.Config(app, host="127.0.0.1", port=self.port, **config)
        self.server = uvicorn.Server(self.config)
        self.thread = threading.Thread(target=self.server.run, name=f"uvicorn-{self.port}")
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

    def __enter__(self) -> UvicornThread:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def env(**values: str | None) -> Iterator[None]:
    """Set (or, with ``None``, unset) environment variables for a block."""
    saved = {name: os.environ.get(name) for name in values}
    try:
        for name, value in values.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def project_root() -> Path:
    return Path(__file__).resolve().parent.parent
