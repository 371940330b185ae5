"""Prometheus multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``): per-process heavy-hitter
counts in the shared directory, summed on scrape; the exported selection shared by every
worker; and the import-order check."""

from __future__ import annotations

import fcntl
import glob
import json
import logging
import os
import threading
import uuid
from typing import Final

from ..._errors import ConfigurationError
from .._heavy_hitters import HeavyHitter, SpaceSaving
from .._stable_top import StableTop

__all__ = ["MULTIPROC_ENV", "HitterFiles", "check_multiprocess"]

logger = logging.getLogger("mcp_cancellation.telemetry")

MULTIPROC_ENV: Final = "PROMETHEUS_MULTIPROC_DIR"
_HITTERS_GLOB: Final = "mcp_cancellation_hitters_*.json"
_SELECTION_FILE: Final = "mcp_cancellation_exported_scopes.json"


class HitterFiles:
    """Per-process heavy-hitter counts in the multiprocess directory, summed on scrape.

    Only labels (session scopes already hashed) are written. A daemon thread rewrites this
    process's file (atomically, by rename) at most every *interval* seconds when it changed.
    """

    def __init__(self, directory: str, hitters: SpaceSaving, interval: float = 1.0) -> None:
        self.directory = directory
        self.path = os.path.join(
            directory, f"mcp_cancellation_hitters_{os.getpid()}_{uuid.uuid4().hex[:8]}.json"
        )
        self._hitters = hitters
        self._interval = interval
        self._dirty = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._run, name="mcp-cancellation-hitters", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join(timeout=5)
        self.flush()

    def close_nowait(self) -> None:
        """Ask the flusher thread to stop, without waiting (for finalizers)."""
        self._stop.set()

    def mark(self) -> None:
        self._dirty.set()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.flush()
        self.flush()  # stopping (uninstall, or the registry was garbage-collected)

    def flush(self) -> None:
        """Write this process's counts now (if they changed since the last write)."""
        if not self._dirty.is_set():
            return
        self._dirty.clear()
        entries, floor = self._hitters.summary()
        data = {"floor": floor, "items": {e.item: [e.estimate, e.error] for e in entries}}
        tmp = self.path + ".tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(data, fh)
            os.replace(tmp, self.path)
        except OSError as exc:  # pragma: no cover - a full or vanished directory
            logger.warning("could not write heavy-hitter counts to %s: %s", self.path, exc)

    def merged(self) -> tuple[list[HeavyHitter], int]:
        """Every process's summary added up (this one's read from memory): estimates and
        errors summed per item, floors summed (an item no process tracks has at most
        that many in all)."""
        entries, floor = self._hitters.summary()
        total = {e.item: [e.estimate, e.error] for e in entries}
        for path in glob.glob(os.path.join(self.directory, _HITTERS_GLOB)):
            if path == self.path:
                continue
            try:
                with open(path, encoding="utf-8") as fh:
                    data = json.load(fh)
            except (OSError, ValueError):
                continue  # being replaced or unreadable: skip this scrape
            if not isinstance(data, dict) or not isinstance(data.get("items"), dict):
                continue
            other_floor = data.get("floor")
            floor += other_floor if isinstance(other_floor, int) else 0
            for item, value in data["items"].items():
                if (
                    isinstance(item, str)
                    and isinstance(value, list)
                    and len(value) == 2
                    and all(isinstance(v, int) for v in value)
                ):
                    counts = total.setdefault(item, [0, 0])
                    counts[0] += value[0]
                    counts[1] += value[1]
        return [HeavyHitter(item, c[0], c[1]) for item, c in total.items()], floor

    def select(self, top: StableTop) -> list[HeavyHitter]:
        """:meth:`StableTop.select` over :meth:`merged`, with the selection's state shared
        by every process of the directory (loaded and saved under a file lock)."""
        entries, floor = self.merged()
        state_path = os.path.join(self.directory, _SELECTION_FILE)
        try:
            with open(state_path + ".lock", "a+b") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                try:
                    with open(state_path, encoding="utf-8") as fh:
                        top.load(json.load(fh))
                except (OSError, ValueError, AttributeError):
                    pass  # first scrape, or a damaged file: start from this process's
                selected = top.select(entries, floor)
                tmp = f"{state_path}.{os.getpid()}.tmp"
                with open(tmp, "w", encoding="utf-8") as fh:
                    json.dump(top.state(), fh)
                os.replace(tmp, state_path)
                return selected
        except OSError as exc:  # pragma: no cover - a full or vanished directory
            logger.warning("could not share the exported heavy hitters: %s", exc)
            return top.select(entries, floor)


def check_multiprocess(directory: str) -> None:
    if not os.path.isdir(directory):
        raise ConfigurationError(f"{MULTIPROC_ENV}={directory!r} is not a directory")
    from prometheus_client import values

    if values.ValueClass is values.MutexValue:
        # prometheus_client chose its value storage when it was imported, before the
        # variable was set: this process's counters will be missing from the exposition.
        logger.warning(
            "%s is set but prometheus_client was imported before it: set it before the "
            "process starts, or this worker's counters are not shared",
            MULTIPROC_ENV,
        )
