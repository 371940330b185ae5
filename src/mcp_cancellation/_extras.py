"""Optional extras: an import that needs one says which to install.

A module that needs an extra imports it inside :func:`requires`; without the extra the
user then gets an :class:`ImportError` such as ``RedisStorage needs the redis extra: pip
install 'mcp-cancellation[redis]'`` instead of a bare ``ModuleNotFoundError``.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

__all__ = ["MissingExtra", "lazy", "requires"]


class MissingExtra(ImportError):
    """A feature's optional extra is not installed (an :class:`ImportError`)."""

    def __init__(self, feature: str, extra: str, missing: str | None) -> None:
        hint = f"pip install 'mcp-cancellation[{extra}]'"
        detail = f" (no module named {missing!r})" if missing else ""
        super().__init__(f"{feature} needs the {extra} extra: {hint}{detail}", name=missing)
        self.feature = feature
        self.extra = extra


@contextlib.contextmanager
def requires(extra: str, feature: str) -> Iterator[None]:
    """Turn a ``ModuleNotFoundError`` raised in the block into :class:`MissingExtra`."""
    try:
        yield
    except ModuleNotFoundError as exc:
        raise MissingExtra(feature, extra, exc.name) from exc


def lazy(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for *package* that imports each name of *homes* from its
    module (relative to *package*) on first use, so that a name whose module needs an
    extra costs nothing to those who do not use it."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(home, package), name)

    return __getattr__
