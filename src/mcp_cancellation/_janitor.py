"""The janitor: a task that runs a registry's cleanup every interval (private)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from ._errors import StorageUnavailable

__all__ = ["Janitor"]

logger = logging.getLogger("mcp_cancellation")


class Janitor:
    """Runs *cleanup* every *interval* seconds on the loop it was started on; a failed
    pass is logged, and the next one runs as planned."""

    def __init__(self, cleanup: Callable[[], Awaitable[object]], interval: float | None) -> None:
        self._cleanup = cleanup
        self.interval = interval
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Idempotent; does nothing when the interval is ``None``."""
        if self.interval is None or self.running:
            return
        self._task = asyncio.get_running_loop().create_task(
            self._loop(self.interval), name="mcp-cancellation-janitor"
        )

    async def stop(self) -> None:
        """Stop the task and wait for it to finish."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        # wait() never raises the janitor's CancelledError, but does propagate our own.
        await asyncio.wait([task])

    async def _loop(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await self._cleanup()
            except StorageUnavailable as exc:
                logger.warning("cancellation cleanup skipped: %s", exc)
            except Exception:  # the janitor must outlive any single failure
                logger.exception("cancellation cleanup failed")
