"""Instructions the middleware adds to a tool call, counted by valgrind's callgrind.

Time on a shared 2-core machine moves by several percent between rounds; the number of
machine instructions a call executes does not. This benchmark runs the demo's
``MCPServer`` app in process (as ``benchmarks/middleware.py``'s in-process figure does),
bare and behind ``CancellationMiddleware``, under ``valgrind --tool=callgrind``, once with
no measured calls and once with ``--calls`` of them: the difference, divided by the calls,
is the instructions per ``tools/call`` with every start-up cost cancelled out.

The instruction ratio is what the capacity ratio would be if every instruction cost the
same. It is not a goal of its own: the middleware's instructions also run with the caches
as the SDK leaves them, so its share of the time is larger than its share of the
instructions (see docs/performance.md). It is the steady figure to compare two versions of
the middleware by.

    python benchmarks/instructions.py [--calls 300] [--mode json|sse|both]

Needs ``valgrind`` (Debian: ``apt-get install valgrind``; ``./dev bench instructions``
installs it). A run takes a few minutes: callgrind runs Python about 50 times slower.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from middleware import call_in_process, demo_apps

_WARM_UP = 30
_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


async def _calls(kind: str, json_response: bool, calls: int) -> None:
    async with demo_apps(json_response) as apps:
        app = apps[kind]
        for _ in range(_WARM_UP):
            await call_in_process(app)
        gc.collect()  # both runs of a pair start the measured calls from the same heap
        for _ in range(calls):
            await call_in_process(app)


def _instructions(kind: str, mode: str, calls: int) -> int:
    """Instructions of one worker process (start-up, warm-up and *calls* calls)."""
    command = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        kind,
        "--mode",
        mode,
        "--calls",
        str(calls),
    ]
    # One string hash seed for every run: dict layouts, hence probe counts, are the same.
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=1800, check=False, env=env
    )
    found = _COLLECTED.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"callgrind run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return int(found.group(1))


def run_mode(mode: str, calls: int) -> None:
    runs = [(kind, n) for kind in ("bare", "wrapped") for n in (0, calls)]
    with ThreadPoolExecutor(max_workers=2) as pool:  # one valgrind per core
        found = pool.map(lambda run: _instructions(run[0], mode, run[1]), runs)
        counts = dict(zip(runs, found, strict=True))
    per_call = {
        kind: (counts[(kind, calls)] - counts[(kind, 0)]) / calls for kind in ("bare", "wrapped")
    }
    bare, wrapped = per_call["bare"], per_call["wrapped"]
    print(f"{mode.upper()} responses, tools/call echo in process ({calls} calls, callgrind):")
    print(f"    bare SDK          {bare:12,.0f} instructions per call")
    print(f"    with middleware   {wrapped:12,.0f} instructions per call")
    print(
        f"    added             {wrapped - bare:12,.0f} ({(wrapped - bare) / bare:.2%} of the "
        f"SDK's): instruction ratio {bare / wrapped:.3f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--calls", type=int, default=300, help="measured calls per run")
    parser.add_argument("--mode", choices=["json", "sse", "both"], default="both")
    parser.add_argument("--worker", choices=["bare", "wrapped"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        asyncio.run(_calls(args.worker, args.mode == "json", args.calls))
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("needs valgrind: apt-get install valgrind (./dev bench installs it)")
    modes = ["json", "sse"] if args.mode == "both" else [args.mode]
    for i, mode in enumerate(modes):
        if i:
            print()
        run_mode(mode, args.calls)


if __name__ == "__main__":
    main()
