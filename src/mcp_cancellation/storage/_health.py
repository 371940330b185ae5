"""A shared storage's health: whether its last call was answered, and one
:data:`~mcp_cancellation.signals.storage_error` per failed operation (private)."""

from __future__ import annotations

import logging

from .. import signals

__all__ = ["Health"]

logger = logging.getLogger("mcp_cancellation.storage")


class Health:
    """Availability as the storage's own calls find it.

    :meth:`answered` and :meth:`failed` are called after every call; each transition is
    logged once (a warning when the storage stops answering, an info line when it is back),
    and every failure is sent as ``storage.error`` with the storage as sender.
    """

    __slots__ = ("_name", "_sender", "available")

    def __init__(self, sender: object, name: str) -> None:
        self._sender = sender
        self._name = name
        self.available = True

    def answered(self) -> None:
        if not self.available:
            self.available = True
            logger.info("%s storage answers again", self._name)

    def failed(self, operation: str, error: BaseException) -> None:
        if self.available:
            self.available = False
            logger.warning("%s storage unavailable (%s: %s)", self._name, operation, error)
        if signals.storage_error.receivers:
            signals.storage_error.fire(self._sender, operation=operation, error=error)
