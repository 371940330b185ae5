"""Signal receivers of the telemetry bridges: guarded, and disconnected in one place (private)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, ParamSpec

__all__ = ["disconnect_all", "logger", "never_raise"]

logger = logging.getLogger("mcp_cancellation.telemetry")

_P = ParamSpec("_P")


def never_raise(receiver: Callable[_P, None]) -> Callable[_P, None]:
    """Log, rather than propagate, an exception from a telemetry receiver.

    Signals are sent synchronously from ``cancel()``, ``cleanup()`` and friends: a failing
    exporter or metrics library must cost a log line, never a cancellation.
    """

    @functools.wraps(receiver)
    def guarded(*args: _P.args, **kwargs: _P.kwargs) -> None:
        try:
            receiver(*args, **kwargs)
        except Exception:
            logger.exception("telemetry receiver %s failed", receiver.__qualname__)

    return guarded


def disconnect_all(receivers: list[tuple[Any, Callable[..., None]]]) -> None:
    """Disconnect each ``(signal, receiver)`` pair from every sender, so that blinker drops
    its (strong) reference to the receiver and, through it, to the bridge."""
    for signal, receiver in receivers:
        signal.disconnect(receiver)
