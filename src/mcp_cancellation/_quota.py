"""The quota policy of a registry: enforce or shadow, and per-scope overrides (private).

A :class:`QuotaPolicy` answers, for each scope, the :class:`~.storage.base.Limits` its
insert runs under: the registry's own, or a copy carrying the scope's override (cached
per quota value, so the hot path allocates nothing).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Mapping
from typing import Literal

from ._errors import ConfigurationError
from .storage._base import Limits

__all__ = ["QUOTA_MODES", "QuotaMode", "QuotaOverrides", "QuotaPolicy", "quota_mode"]

logger = logging.getLogger("mcp_cancellation")

#: ``quota_mode`` values: refuse past the quota, or only count what would be refused.
QuotaMode = Literal["enforce", "shadow"]
QUOTA_MODES: tuple[QuotaMode, ...] = ("enforce", "shadow")
#: Per-scope quotas: a mapping from scope to quota, or a callable returning a scope's
#: quota; ``None`` (or a missing key) means the default ``max_rows_per_scope``.
QuotaOverrides = Mapping[str, int | None] | Callable[[str], int | None]

#: Distinct override values kept as ready-made ``Limits`` (a callable may answer many).
_CACHED_QUOTAS = 1024


def quota_mode(value: object) -> QuotaMode:
    """*value*, else ``$MCP_CANCELLATION_QUOTA_MODE``, else ``enforce``; validated."""
    if value is None:
        value = os.environ.get("MCP_CANCELLATION_QUOTA_MODE", "").strip().lower() or "enforce"
    if value == "enforce" or value == "shadow":
        return value
    raise ConfigurationError(f"quota_mode must be 'enforce' or 'shadow', not {value!r}")


def _check(quota: object, where: str) -> None:
    if quota is not None and (isinstance(quota, bool) or not isinstance(quota, int) or quota < 1):
        raise ConfigurationError(f"{where} must be a positive integer or None, not {quota!r}")


class QuotaPolicy:
    """The limits each scope's inserts run under (see the module docstring)."""

    __slots__ = ("_by_quota", "_overrides", "limits", "overridden")

    def __init__(self, limits: Limits, overrides: QuotaOverrides | None) -> None:
        if overrides is not None and not callable(overrides):
            if not isinstance(overrides, Mapping):
                raise ConfigurationError("quota_overrides must be a mapping or a callable")
            for scope, quota in overrides.items():
                _check(quota, f"quota_overrides[{scope!r}]")
        self.limits = limits
        self._overrides = overrides
        #: Whether any scope may have an override (else every scope has ``limits``).
        self.overridden = overrides is not None
        self._by_quota: dict[int, Limits] = {}

    def limits_for(self, scope: str) -> Limits:
        """The limits of *scope*: the default ones, or with its override as the quota. A
        callable that raises or answers nonsense gives the default (logged)."""
        overrides = self._overrides
        if overrides is None:
            return self.limits
        if callable(overrides):
            try:
                quota = overrides(scope)
                _check(quota, "quota_overrides(...)")
            except Exception:
                logger.exception("quota_overrides failed for a scope; the default quota applies")
                return self.limits
        else:
            quota = overrides.get(scope)
        if quota is None:
            return self.limits
        found = self._by_quota.get(quota)
        if found is None:
            if len(self._by_quota) >= _CACHED_QUOTAS:
                self._by_quota.clear()
            found = dataclasses.replace(self.limits, max_rows_per_scope=quota)
            self._by_quota[quota] = found
        return found
