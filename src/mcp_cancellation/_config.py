"""Reading limits from arguments or the environment (private)."""

from __future__ import annotations

import math
import os

from ._errors import ConfigurationError

_DISABLED = frozenset({"none", "infinity", "inf", "unlimited", "off"})


class _Unset:
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNSET"


UNSET = _Unset()


def int_limit(name: str, value: int | _Unset | None, env: str, default: int | None) -> int | None:
    """A positive int or ``None`` (disabled), from *value*, else ``$env``, else *default*."""
    if isinstance(value, _Unset):
        raw = os.environ.get(env)
        if raw is None or not raw.strip():
            return default
        text = raw.strip().lower()
        if text in _DISABLED:
            return None
        try:
            value = int(text)
        except ValueError:
            raise ConfigurationError(
                f"{env}={raw!r}: expected a positive integer or 'none'"
            ) from None
        source = env
    else:
        source = name
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{source} must be a positive integer or None, not {value!r}")
    return value


def seconds(
    name: str,
    value: float | _Unset | None,
    env: str | None,
    default: float | None,
    *,
    zero: bool = False,
) -> float | None:
    """A positive (with *zero*, non-negative), finite number of seconds or ``None``, from
    *value*, ``$env`` or *default*."""
    source = name
    if isinstance(value, _Unset):
        raw = os.environ.get(env) if env else None
        if raw is None or not raw.strip():
            return default
        if raw.strip().lower() in _DISABLED:
            return None
        try:
            value = float(raw)
        except ValueError:
            raise ConfigurationError(f"{env}={raw!r}: expected a number of seconds") from None
        source = env or name
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(f"{source} must be a number of seconds or None, not {value!r}")
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float is not a finite duration
        number = math.inf
    if not math.isfinite(number) or number < 0 or (number == 0 and not zero):
        least = "non-negative" if zero else "positive"
        raise ConfigurationError(f"{source} must be {least} and finite, not {value!r}")
    return number
