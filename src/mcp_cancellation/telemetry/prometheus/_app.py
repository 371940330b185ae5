"""The ``/metrics`` ASGI app: :func:`metrics_app` and the bridge it sets up once per
registry."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._asgi import Receive, Scope, Send, header, send_response, served_unless_http
from ..._extras import requires
from ...scope import resolve_key
from .._bridge import Setups
from ._bridge import PrometheusBridge

with requires("prometheus", "The Prometheus bridge (mcp_cancellation.telemetry.prometheus)"):
    from prometheus_client import CollectorRegistry

if TYPE_CHECKING:
    from ..._registry import CancellationRegistry

__all__ = ["MetricsApp", "metrics_app"]


#: Bridges installed by metrics_app, per registry and collector registry (0: private).
_setups: Setups[PrometheusBridge] = Setups()


class MetricsApp:
    """The ASGI app returned by :func:`metrics_app`; ``.bridge`` is its bridge."""

    def __init__(self, registry: CancellationRegistry, bridge: PrometheusBridge) -> None:
        self.registry = registry  # keeps the registry alive as long as the app is mounted
        self.bridge = bridge

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if await served_unless_http(scope, receive, send):
            return
        method = scope.get("method", "GET")
        if method not in ("GET", "HEAD"):
            await send_response(send, 405, headers=[(b"allow", b"GET, HEAD")])
            return
        body, content_type = await self.bridge.render(header(scope, b"accept") or "")
        await send_response(
            send,
            200,
            body,
            content_type=content_type.encode("latin-1"),
            headers=[(b"cache-control", b"no-store")],
            send_body=method != "HEAD",
        )


def metrics_app(
    registry: CancellationRegistry,
    *,
    top_k: int = 20,
    collector_registry: CollectorRegistry | None = None,
    hash_key: str | bytes | None = None,
) -> MetricsApp:
    """An ASGI app serving the Prometheus exposition of *registry* at any path.

    Installs a :class:`PrometheusBridge` for *registry* (once: calling this again for the
    same registry and collector registry reuses it). By default the metrics live in a
    private ``CollectorRegistry``, so several apps in one process never clash; pass
    ``collector_registry=prometheus_client.REGISTRY`` to serve the process-wide one (with
    everything else registered there). ``GET`` and ``HEAD`` only; content negotiation
    (OpenMetrics) follows ``Accept``.
    """
    key = 0 if collector_registry is None else id(collector_registry)

    def conflict(bridge: PrometheusBridge) -> str | None:
        if bridge.top_k != top_k or bridge.labeler.key != resolve_key(hash_key):
            return f"metrics_app() for this registry uses top_k={bridge.top_k} and its hash_key"
        return None

    def make() -> PrometheusBridge:
        return PrometheusBridge(
            registry,
            collector_registry=collector_registry or CollectorRegistry(),
            top_k=top_k,
            hash_key=hash_key,
        )

    return MetricsApp(registry, _setups.get_or_install(registry, key, conflict, make))
