"""The package's log lines on stderr, for servers that have not configured logging.

Everything logs under the ``mcp_cancellation`` logger (the middleware one INFO line per
cancelled call: scope kind, id, reason, how it ended). Python shows nothing at INFO unless
configured, and MCP SDKs style the root logger; :func:`log_to_stderr` gives this package a
plain handler of its own. Under a root logger that only Rich handlers serve (as the
SDK's ``MCPServer`` sets it up), :func:`plain_beside_rich` does so by itself, at the
root's level: Rich folds a line to its message column, 3 or 4 lines for one cancellation.
"""

from __future__ import annotations

import logging

__all__ = ["log_to_stderr", "plain_beside_rich"]

_FORMAT = "%(levelname)s %(name)s: %(message)s"


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler :func:`log_to_stderr` adds (recognised by its class)."""


def _plain_handler(logger: logging.Logger) -> logging.Handler:
    handler = next((h for h in logger.handlers if isinstance(h, _StderrHandler)), None)
    if handler is None:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter(_FORMAT))
        logger.addHandler(handler)
    logger.propagate = False
    return handler


def plain_beside_rich() -> bool:
    """Give the ``mcp_cancellation`` logger the plain stderr handler of
    :func:`log_to_stderr`, keeping the root's level, when nobody configured that logger
    (no handler, still propagating) and every root handler is Rich's (as the SDK's
    ``MCPServer`` sets up): one line a record, as uvicorn's own loggers print beside it.
    The middleware calls it at start-up and at its first request (by then the SDK has
    set up logging). Returns whether it added the handler."""
    logger = logging.getLogger("mcp_cancellation")
    if logger.handlers or not logger.propagate:
        return False
    handlers = logging.getLogger().handlers
    if not handlers or any(type(h).__name__ != "RichHandler" for h in handlers):
        return False
    _plain_handler(logger)
    return True


def log_to_stderr(level: int = logging.INFO) -> logging.Handler:
    """Log ``mcp_cancellation`` records at *level* and above to stderr with a plain
    ``LEVEL name: message`` format, and not through the root logger (no duplicates under
    an SDK's handler). Returns the handler, to remove it again. Calling it twice adds one
    handler, not two."""
    logger = logging.getLogger("mcp_cancellation")
    handler = _plain_handler(logger)
    logger.setLevel(level)
    return handler
