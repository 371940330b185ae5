"""``mcp-cancellation simulate``: well-behaved and abusive cancellation traffic, on loopback.

Drives a server running behind :class:`~mcp_cancellation.CancellationMiddleware` (normally
``mcp-cancellation demo --trusted-proxy 127.0.0.1``) over raw MCP Streamable HTTP, so that
its metrics, dashboards and alerts have something to show. Three populations run at once,
each caller in its own scope through ``X-Forwarded-For`` (addresses from the documentation
ranges of RFC 5737 and RFC 3849):

* **clients** (``192.0.2.0/24``): each calls ``slow_count`` and, most of the time, cancels
  its own call with ``notifications/cancelled`` sent on another POST from the same address,
  as a real client whose user pressed "stop" would. Their ids start at 1, like every SDK
  client's, so they collide with everyone else's ids, which is harmless across scopes.
* **flood** (``198.51.100.0/24``, ``203.0.113.0/24`` and ``2001:db8::/32`` /64s): a stream of
  ``notifications/cancelled`` for ids 1..1000 from many addresses, aimed at other callers'
  requests. The middleware only records a cancellation for a request in flight in the
  caller's own scope, so these are answered 202 and ignored: that is the defence working.
  A small share carries an invalid id, which is rejected (``invalid_request_id``).
* **hogs** (``192.0.2.200`` and up): each keeps more slow calls in flight in its one scope
  than the per-scope quota allows and cancels them all in bursts, so its scope sits at the
  quota and the surplus cancellations are rejected (``quota``, JSON-RPC -32000).

Everything is bounded: the run stops after ``--duration`` seconds or ``--max-requests``
HTTP requests, whichever comes first (or at SIGINT/SIGTERM, still printing its counts), and
the URL must be a loopback address: this is a tool for your own test server, not for anyone
else's.

The server must trust the simulator as a proxy (``--trusted-proxy 127.0.0.1`` on the demo),
otherwise every request lands in the single scope ``ip:127.0.0.1``.
"""

from __future__ import annotations

from .._extras import requires

with requires("mcp", "mcp-cancellation simulate"):
    from ._command import simulate
    from ._config import SimulationConfig, SimulationStats

__all__ = [
    "SimulationConfig",
    "SimulationStats",
    "simulate",
]
