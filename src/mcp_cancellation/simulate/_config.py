"""What a simulation runs and what it counted, and the loopback-only rule."""

from __future__ import annotations

import dataclasses
import ipaddress
import urllib.parse

from .._redaction import redact_url

__all__ = ["PROTOCOL_VERSION", "SimulationConfig", "SimulationStats", "require_loopback"]

#: The protocol version the simulator speaks: the newest one that still has client-to-server
#: ``notifications/cancelled`` on HTTP (2026-07-28 cancels by closing the stream instead).
PROTOCOL_VERSION = "2025-11-25"


@dataclasses.dataclass(frozen=True, kw_only=True)
class SimulationConfig:
    """What to run, for how long. Defaults give a few hundred requests per second."""

    url: str
    duration: float = 30.0
    max_requests: int = 200_000
    clients: int = 4
    call_seconds: int = 3
    cancel_share: float = 0.8
    flood_rate: float = 100.0
    flood_addresses: int = 500
    flood_max_id: int = 1000
    flood_invalid_share: float = 0.02
    hogs: int = 2
    #: calls each hog keeps in flight; 0: the server's quota and a half, read from /metrics
    hog_calls: int = 0
    hog_tool: str = "stubborn_sleep"
    hog_call_seconds: float = 20.0
    hog_interval: float = 0.5
    #: clients whose every call goes to a tool that ignores cancellation, cancelled from
    #: another POST soon after it started: the calls run to their end anyway
    ignorers: int = 0
    ignorer_tool: str = "ignores_cancellation"
    ignorer_call_seconds: float = 15.0
    #: clients that run ``slow_count`` as tasks (SEP-2663): create one, poll it with
    #: ``tasks/get`` and, as often as ``cancel_share`` says, stop it with ``tasks/cancel``
    task_clients: int = 1
    seed: int | None = None

    def __post_init__(self) -> None:
        require_loopback(self.url)
        if not 0 < self.duration <= 3600:
            raise ValueError("duration must be in (0, 3600] seconds")
        if self.max_requests < 1:
            raise ValueError("max_requests must be at least 1")
        names = ("clients", "flood_addresses", "hogs", "hog_calls", "flood_max_id", "ignorers")
        for name in (*names, "task_clients"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")
        if not 0 <= self.cancel_share <= 1 or not 0 <= self.flood_invalid_share <= 1:
            raise ValueError("shares must be between 0 and 1")
        if (
            self.flood_rate < 0
            or self.call_seconds <= 0
            or self.hog_call_seconds <= 0
            or self.ignorer_call_seconds <= 0
        ):
            raise ValueError("rates and call durations must be positive")
        if self.hog_interval <= 0:
            raise ValueError("hog_interval must be positive")


@dataclasses.dataclass
class SimulationStats:
    """What happened, counted by the simulator (the server's metrics count the same)."""

    requests: int = 0
    calls_started: int = 0
    calls_completed: int = 0
    calls_cancelled: int = 0
    calls_failed: int = 0
    cancels_sent: int = 0
    cancels_accepted: int = 0
    quota_rejected: int = 0
    invalid_rejected: int = 0
    flood_sent: int = 0
    flood_ignored: int = 0
    hog_calls: int = 0
    ignored_calls: int = 0
    tasks_created: int = 0
    tasks_completed: int = 0
    tasks_cancelled: int = 0
    transport_errors: int = 0
    http_errors: int = 0
    elapsed: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)


def require_loopback(url: str) -> None:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {redact_url(url)!r}")
    host = parts.hostname
    if host == "localhost":
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ValueError(
            f"refusing to send simulated attack traffic to a non-loopback host: {host}"
        )
