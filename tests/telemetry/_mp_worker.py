"""A worker process for the multiprocess test (run as a script, never collected).

``work N``: cancels in its own scopes with ``PROMETHEUS_MULTIPROC_DIR`` set, then
uninstalls its bridge (which flushes its heavy-hitter counts) and exits; ``work-live N``
instead waits for its flusher thread to write them and exits abruptly.
``scrape``: prints the exposition one worker's ``/metrics`` would serve.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time

from prometheus_client import CollectorRegistry

from mcp_cancellation import CancellationLimitReached, CancellationRegistry
from mcp_cancellation.telemetry.prometheus import PrometheusBridge, metrics_app

OFFENDER = "ip:203.0.113.66"
_alive: list[CancellationRegistry] = []  # a live worker's registry outlives work()


async def work(n: int, live: bool) -> PrometheusBridge:
    # A cap of 40 rows, evicting 2 at a time: the burst of session cancellations below
    # evicts the offender's two rows in one go (the largest scope), then the n others.
    registry = CancellationRegistry(max_rows_per_scope=2, max_rows=40, janitor_interval=None)
    _alive.append(registry)
    bridge = PrometheusBridge(registry, collector_registry=CollectorRegistry()).install()
    for i in range(n):
        await registry.cancel(i, None, f"ip:10.0.{os.getpid() % 250}.{i}")
    for i in range(2 + n):  # two accepted, n rejected
        with contextlib.suppress(CancellationLimitReached):
            await registry.cancel(i, None, OFFENDER)
    for i in range(40):  # n + 2 + 40 rows: n + 2 evicted, rounded up to the batch
        await registry.cancel(i, None, f"session:s{os.getpid()}-{i}")
    if not live:
        bridge.uninstall()  # flushes this worker's heavy-hitter counts
    return bridge


def exit_once_flushed(bridge: PrometheusBridge) -> None:
    """A worker that never shuts down cleanly: its flusher thread must write the counts."""
    assert bridge._files is not None
    deadline = time.monotonic() + 20
    while not os.path.exists(bridge._files.path):
        assert time.monotonic() < deadline, "heavy hitters never flushed"
        time.sleep(0.05)
    os._exit(0)


async def scrape() -> None:
    registry = CancellationRegistry(janitor_interval=None)
    app = metrics_app(registry)
    await registry.cancel(1, None, "principal:scraper")
    body, _ = await app.bridge.render()
    sys.stdout.write(body.decode())


if __name__ == "__main__":
    assert os.environ.get("PROMETHEUS_MULTIPROC_DIR"), "needs PROMETHEUS_MULTIPROC_DIR"
    if sys.argv[1] in ("work", "work-live"):
        live = sys.argv[1] == "work-live"
        bridge = asyncio.run(work(int(sys.argv[2]), live))
        if live:
            exit_once_flushed(bridge)
    else:
        asyncio.run(scrape())
