"""Helpers shared by the benchmark scripts: repeat, take the best, print a ratio line.

Machines here are shared and noisy, so every figure is the best of several rounds and is
printed beside a baseline measured in the same run; the ratio is the number to read.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["address_scope", "best_of", "check", "quiet_gc", "report"]


def address_scope(i: int) -> str:
    """The *i*-th scope of an address-rotation flood, one address each (distinct for
    ``i < 2**24``): the table shape the cap exists to absorb, which every benchmark that
    floods the table builds."""
    return f"ip:10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}"


@contextmanager
def quiet_gc() -> Iterator[None]:
    """Collect once, then keep the cyclic GC out of the timed region."""
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def best_of(rounds: int, run: Callable[[], float]) -> float:
    """The smallest of *rounds* measurements (seconds per operation)."""
    return min(run() for _ in range(rounds))


def report(name: str, value: float, baseline: float, unit: str = "us", scale: float = 1e6) -> float:
    """Print ``name: value vs baseline (ratio)`` and return the ratio value/baseline."""
    ratio = value / baseline if baseline else float("inf")
    print(
        f"  {name:<52} {value * scale:10.3f} {unit}  baseline {baseline * scale:10.3f} {unit}"
        f"  ratio {ratio:6.2f}x"
    )
    return ratio


def check(label: str, ok: bool, figure: str = "") -> bool:
    """Print whether a target was met, with the measured *figure* (a ratio, a count) if
    given; benchmarks report, they do not fail. ``./dev bench`` gathers these lines into
    one list of goals at the end of a run."""
    print(f"  target {'met' if ok else 'MISSED'}: {label}" + (f" ({figure})" if figure else ""))
    return ok


def now() -> float:
    return time.perf_counter()
