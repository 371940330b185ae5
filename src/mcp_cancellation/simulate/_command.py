"""Running a simulation: :func:`simulate`, and the ``mcp-cancellation simulate`` command."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import signal
import sys
import urllib.parse
from collections.abc import Callable
from types import FrameType
from typing import Any, TextIO

from .._extras import requires
from ._config import SimulationConfig, SimulationStats
from ._traffic import Simulation

with requires("mcp", "mcp-cancellation simulate"):
    import httpx

__all__ = ["add_parser", "run", "server_quota", "simulate"]

_DEFAULT_HOG_CALLS = 24
_MAX_HOG_CALLS = 400


async def simulate(
    config: SimulationConfig,
    *,
    on_progress: Callable[[SimulationStats, float], None] | None = None,
    stop: asyncio.Event | None = None,
) -> SimulationStats:
    """Run the simulation described by *config* and return what it counted.

    Setting *stop* ends the run early, as cleanly as reaching its time limit does.
    """
    hog_calls = config.hog_calls
    if hog_calls == 0 and config.hogs:
        quota = await server_quota(config.url)
        hog_calls = (
            _DEFAULT_HOG_CALLS if quota is None else min(_MAX_HOG_CALLS, quota + quota // 2 + 2)
        )
    simulation = Simulation(config, hog_calls, stop)
    await simulation.run(on_progress)
    return simulation.stats


async def _main(
    config: SimulationConfig, on_progress: Callable[[SimulationStats, float], None]
) -> SimulationStats:
    """:func:`simulate`, stopped early and cleanly (counts printed) by SIGINT or SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # The handlers in place before are put back afterwards: asyncio's
    # remove_signal_handler() resets SIGTERM to its default, not to the caller's handler.
    handled: list[tuple[signal.Signals, Callable[[int, FrameType | None], Any] | int | None]] = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        previous = signal.getsignal(signum)
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signum, stop.set)
            handled.append((signum, previous))
    try:
        return await simulate(config, on_progress=on_progress, stop=stop)
    finally:
        for signum, previous in handled:
            loop.remove_signal_handler(signum)
            if previous is not None:
                signal.signal(signum, previous)


async def server_quota(url: str) -> int | None:
    """The server's ``max_rows_per_scope``, read from ``/metrics`` next to *url*, if any."""
    metrics = urllib.parse.urljoin(url, "/metrics")
    try:
        async with httpx.AsyncClient(timeout=5, trust_env=False) as client:
            response = await client.get(metrics)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    for line in response.text.splitlines():
        series, _, value = line.rpartition(" ")
        if series.partition("{")[0] == "mcp_cancellation_max_rows_per_scope":
            try:
                quota = float(value)
            except ValueError:
                return None
            return int(quota) if math.isfinite(quota) and quota >= 1 else None
    return None


class _ProgressBar:
    """A one-line progress bar on a terminal (redrawn in place), silent elsewhere."""

    def __init__(self, stream: TextIO, width: int = 30) -> None:
        self.stream = stream
        self.width = width
        self.enabled = stream.isatty()

    def __call__(self, stats: SimulationStats, fraction: float) -> None:
        if not self.enabled:
            return
        filled = int(self.width * fraction)
        bar = "#" * filled + "-" * (self.width - filled)
        line = (
            f"\r[{bar}] {stats.elapsed:5.1f}s  calls {stats.calls_started}"
            f"  cancelled {stats.calls_cancelled}  flood {stats.flood_sent}"
            f"  quota-rejected {stats.quota_rejected}"
        )
        self.stream.write(line)
        if fraction >= 1.0:
            self.stream.write("\n")
        self.stream.flush()


_DEFAULT = " (default %(default)s)"
#: The simulation's options: its config's fields, their types and what they mean.
_OPTIONS: tuple[tuple[str, Callable[[str], Any], str], ...] = (
    ("duration", float, "seconds"),
    ("max_requests", int, "HTTP request budget"),
    ("clients", int, "well-behaved clients"),
    ("call_seconds", int, "slow_count length"),
    ("flood_rate", float, "flood notifications/s"),
    ("flood_addresses", int, "flood sources"),
    ("flood_invalid_share", float, "share of flood notifications with an invalid id, rejected"),
    ("hogs", int, "scopes that sit at their quota"),
    ("hog_calls", int, "calls each hog keeps in flight (0: 1.5 x the server's quota)"),
    ("hog_tool", str, "a tool that ignores cancellation polls"),
    ("hog_call_seconds", float, "its length"),
    ("ignorers", int, "clients calling a tool that ignores cancellation, and cancelling it"),
    ("ignorer_tool", str, "the tool they call"),
    ("ignorer_call_seconds", float, "its length"),
    ("task_clients", int, "clients running slow_count as tasks (SEP-2663), if the server has them"),
)


def add_parser(subparsers: Any) -> None:
    """Register ``simulate`` on the ``mcp-cancellation`` command."""
    defaults = SimulationConfig(url="http://127.0.0.1:8000/mcp")
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "simulate",
        help="send well-behaved and abusive cancellation traffic to a local server",
        description=(
            "Drive a local MCP server behind CancellationMiddleware (e.g. `mcp-cancellation "
            "demo --trusted-proxy 127.0.0.1`) with well-behaved clients, a flood of "
            "notifications/cancelled from many addresses (X-Forwarded-For) and scopes that "
            "hog their quota. Loopback URLs only; bounded in time and requests."
        ),
    )
    arg = parser.add_argument
    arg("--url", required=True, help="the MCP endpoint, e.g. http://127.0.0.1:8000/mcp")
    for field, kind, text in _OPTIONS:
        flag = "--" + field.replace("_", "-")
        arg(flag, type=kind, default=getattr(defaults, field), help=text + _DEFAULT)
    arg("--seed", type=int, default=None, help="random seed, for repeatable runs")
    arg("--json", action="store_true", help="print the final counts as JSON on stdout")
    arg("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run the simulation from parsed arguments; 0 when the server answered throughout."""
    try:
        options = {field: getattr(args, field) for field, _, _ in _OPTIONS}
        config = SimulationConfig(url=args.url, seed=args.seed, **options)
    except ValueError as exc:
        print(f"mcp-cancellation simulate: {exc}", file=sys.stderr)
        return 2
    bar = _ProgressBar(sys.stderr)
    if args.no_progress:
        bar.enabled = False
    stats = asyncio.run(_main(config, bar))
    if args.json:
        print(json.dumps(stats.as_dict(), sort_keys=True))
    else:
        width = max(len(name) for name in stats.as_dict())
        for name, value in stats.as_dict().items():
            shown = f"{value:.1f}" if isinstance(value, float) else str(value)
            print(f"{name.replace('_', ' '):<{width}}  {shown}")
    if stats.calls_started == 0 or stats.transport_errors > stats.requests // 10:
        print("mcp-cancellation simulate: the server did not answer", file=sys.stderr)
        return 1
    return 0
