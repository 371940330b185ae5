"""Deprecated alias: use :mod:`mcp_cancellation.integrations.mcp_sdk` and
:mod:`mcp_cancellation.integrations.fastmcp`.

The SDK and FastMCP glue moved under ``integrations/`` after 0.1.0; this module still
serves the old names, with a :class:`DeprecationWarning`, and will be removed in 1.0.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

#: Each old name -> the module that now holds it.
_MOVED = {
    "REQUEST_CANCELLED_MESSAGE": "mcp_sdk",
    "CancellationServerMiddleware": "mcp_sdk",
    "cancellable": "mcp_sdk",
    "cancelled_error": "mcp_sdk",
    "fastmcp_middleware": "fastmcp",
}

__all__ = sorted(_MOVED)

warnings.warn(
    "mcp_cancellation.tools is deprecated: import from mcp_cancellation.integrations.mcp_sdk "
    "(cancellable, CancellationServerMiddleware, cancelled_error) or "
    "mcp_cancellation.integrations.fastmcp (fastmcp_middleware)",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str) -> Any:
    module = _MOVED.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__package__}.integrations.{module}"), name)
