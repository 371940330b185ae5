"""A shared storage's health: whether its last call was answered, and one
:data:`~mcp_cancellation.signals.storage_error` per failed operation (private)."""

from __future__ import annotations

import logging
import time

from .. import signals

__all__ = ["Health"]

logger = logging.getLogger("mcp_cancellation.storage")


class Health:
    """Availability as the storage's own calls find it.

    :meth:`answered` and :meth:`failed` are called after every call; each transition is
    logged once (a warning when the storage stops answering, an info line when it is back),
    and every failure is sent as ``storage.error`` with the storage as sender.
    """

    __slots__ = ("_name", "available", "failed_at", "refused", "sender", "stalled")

    def __init__(self, sender: object, name: str) -> None:
        #: The storage that ``storage.error`` names (a partitioned storage, for its parts).
        self.sender = sender
        self._name = name
        self.available = True
        #: ``time.monotonic()`` of the last failure (``None``: none yet).
        self.failed_at: float | None = None
        #: Whether the last failure was a refusal by a server that answered (a missing
        #: permission, out of memory) rather than no answer: then a read that succeeds
        #: does not show that the storage is back.
        self.refused = False
        #: Whether the last failure was a call that timed out (Redis stalled, or this
        #: process's own loop was too busy to read the answer): the writes it held stay
        #: queued and go first when Redis answers, so only their scopes are in doubt.
        self.stalled = False

    def failed_within(self, seconds: float) -> bool:
        """Whether a call failed in the last *seconds*."""
        return self.failed_at is not None and time.monotonic() - self.failed_at < seconds

    def answered(self) -> None:
        if not self.available:
            self.available = True
            logger.info("%s storage answers again", self._name)

    def recovering_elsewhere(self) -> None:
        """Another worker reported that Redis refuses its writes (counts as a failure for
        :meth:`failed_within`, without a log line or signal)."""
        self.failed_at = time.monotonic()
        self.stalled = False

    def failed(self, operation: str, error: BaseException) -> None:
        self.failed_at = time.monotonic()
        if self.available:
            self.available = False
            logger.warning("%s storage unavailable (%s: %s)", self._name, operation, error)
        if signals.storage_error.receivers:
            signals.storage_error.send(self.sender, operation=operation, error=error)
