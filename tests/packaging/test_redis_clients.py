"""The oldest redis-py the ``redis`` extra admits and 8.1.0, each in a fresh venv with the
wheel: two workers on a real redis-server (and, on 8.1.0, on the six-node cluster) cancel
each other's requests, after a burst of first calls from a fresh client. (The suite's own
venv runs everything else on the newest.)"""

from __future__ import annotations

import subprocess
import textwrap
import venv
from collections.abc import Callable
from pathlib import Path

import pytest

from ..support import redis_url

#: (Each builds a wheel or a virtualenv: seconds, left out of ./dev quick.)
pytestmark = [pytest.mark.redis, pytest.mark.slow]

SCRIPT = textwrap.dedent(
    """
    import asyncio, sys, time, uuid

    import redis

    from mcp_cancellation import CancellationRegistry, RedisStorage


    async def until(condition):
        deadline = time.monotonic() + 10
        while not await condition():
            assert time.monotonic() < deadline, "condition not met within 10 s"
            await asyncio.sleep(0.01)


    async def main(url):
        prefix = "compat-" + uuid.uuid4().hex[:8]
        # A fresh client's first calls at once (on a cluster, before it has the slot map).
        burst = CancellationRegistry(RedisStorage.from_url(url, prefix=prefix + "-burst"))
        scopes = [f"ip:192.0.2.{n}" for n in range(5)]
        await asyncio.gather(*(burst.cancel(n, "burst", scope=scopes[n % 5]) for n in range(250)))
        assert (await burst.stats()).total_rows == 250
        await burst.aclose()
        a = CancellationRegistry(RedisStorage.from_url(url, prefix=prefix), janitor_interval=None)
        b = CancellationRegistry(RedisStorage.from_url(url, prefix=prefix), janitor_interval=None)
        async with a.request(1, "ip:192.0.2.1", tool="poll") as token:
            await until(lambda: b.in_flight(1, scope="ip:192.0.2.1"))
            (seen,) = await b.requests()
            assert (seen.request_id, seen.tool, seen.worker) == ("1", "poll", a.instance_id)
            assert await b.cancel_in_flight(1, "stop", "ip:192.0.2.1")

            async def flipped():
                return token.cancelled

            await until(flipped)
            assert token.reason == "stop"
        await until(lambda: _empty(b))
        await a.aclose()
        await b.aclose()
        print("redis-py", redis.__version__, "ok")


    async def _empty(registry):
        stats = await registry.stats()
        return stats.total_rows == 0 and stats.total_in_flight == 0


    asyncio.run(main(sys.argv[1]))
    """
)


@pytest.fixture(scope="module")
def client_venvs(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """A fresh venv with the wheel and redis-py *version*, made once per version: the
    Python to run."""
    made: dict[str, Path] = {}

    def python(version: str) -> Path:
        if version not in made:
            home = tmp_path_factory.mktemp(f"redis-py-{version}")
            venv.create(home, with_pip=True, symlinks=True)
            (wheel,) = dist.glob("*.whl")
            pip: list[str | Path] = [home / "bin" / "python", "-m", "pip", "install", "-q"]
            installed = subprocess.run(
                [*pip, f"{wheel}[redis]", f"redis=={version}"],
                capture_output=True,
                text=True,
                timeout=240,
                check=False,
            )
            assert installed.returncode == 0, installed.stdout + installed.stderr
            made[version] = home / "bin" / "python"
        return made[version]

    return python


@pytest.mark.parametrize(
    ("version", "backend"),
    [
        ("5.0.1", "redis"),
        ("8.1.0", "redis"),
        pytest.param("8.1.0", "redis-cluster", marks=pytest.mark.cluster),
    ],
)
def test_two_workers_cancel_across_each_other_with_this_redis_py(
    version: str,
    backend: str,
    client_venvs: Callable[[str], Path],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    url = redis_url(backend, request)
    python = client_venvs(version)
    script = tmp_path / "workers.py"
    script.write_text(SCRIPT, encoding="utf-8")
    ran = subprocess.run(
        [python, str(script), url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert f"redis-py {version} ok" in ran.stdout
