"""The package's log lines on stderr, for servers that have not configured logging.

Everything logs under the ``mcp_cancellation`` logger (the middleware one INFO line per
cancelled call: scope kind, id, reason, how it ended). Python shows nothing at INFO unless
configured, and MCP SDKs style the root logger; :func:`log_to_stderr` gives this package a
plain handler of its own.
"""

from __future__ import annotations

import logging

__all__ = ["log_to_stderr"]

_FORMAT = "%(levelname)s %(name)s: %(message)s"


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler :func:`log_to_stderr` adds (recognised by its class)."""


def log_to_stderr(level: int = logging.INFO) -> logging.Handler:
    """Log ``mcp_cancellation`` records at *level* and above to stderr with a plain
    ``LEVEL name: message`` format, and not through the root logger (no duplicates under
    an SDK's handler). Returns the handler, to remove it again. Calling it twice adds one
    handler, not two."""
    logger = logging.getLogger("mcp_cancellation")
    handler = next((h for h in logger.handlers if isinstance(h, _StderrHandler)), None)
    if handler is None:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter(_FORMAT))
        logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
    return handler
