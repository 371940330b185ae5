"""Both bridges behind the real demo server: a client cancels a running tool over HTTP.

The demo app runs on a real uvicorn, wrapped by a minimal ASGI layer that opens a server
span per request with the test's tracer provider (what OpenTelemetry's ASGI
instrumentation does) and marks the caller's session as validated. A raw ``tools/call``
runs ``slow_count``; a ``notifications/cancelled`` POST of the same session stops it.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mcp_cancellation import REQUEST_CANCELLED, CancellationRegistry, MemoryStorage
from mcp_cancellation._demo import build_demo_app
from mcp_cancellation.scope import SESSION_KEY
from mcp_cancellation.telemetry import otel
from mcp_cancellation.telemetry.otel import _names as otel_names

from ..jsonrpc import HANDSHAKE, SSE_AND_JSON, call_body, cancel_body
from ..support import UvicornThread, async_wait_until, stats_now
from ._util import SESSION_ID, samples, value

pytestmark = pytest.mark.e2e

HEADERS = {**SSE_AND_JSON, "mcp-protocol-version": HANDSHAKE, "x-session": SESSION_ID}


class ServerSpans:
    """A server span around every HTTP request, named by the test's ``x-label`` header."""

    def __init__(self, app: Any, tracer: trace.Tracer) -> None:
        self.app = app
        self.tracer = tracer

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or ())
        session = headers.get(b"x-session")
        if session:  # what a server that validated the session would do
            scope[SESSION_KEY] = session.decode()
        label = headers.get(b"x-label", b"other").decode()
        with self.tracer.start_as_current_span(label, kind=trace.SpanKind.SERVER):
            await self.app(scope, receive, send)


async def test_cancel_over_http_is_traced_and_counted(
    tracer_provider: TracerProvider,
    meter_provider: MeterProvider,
    span_exporter: InMemorySpanExporter,
) -> None:
    registry = CancellationRegistry(MemoryStorage(), janitor_interval=None)
    otel.instrument(registry, tracer_provider=tracer_provider, meter_provider=meter_provider)
    app = ServerSpans(
        build_demo_app(registry, json_response=True, poll_interval=0.02),
        tracer_provider.get_tracer("asgi-server"),
    )
    call = call_body(77, "slow_count", {"seconds": 60})
    cancel = cancel_body(77, "user pressed stop")
    answers: dict[str, httpx.Response] = {}
    try:
        with UvicornThread(app) as server:
            async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:

                async def run_call() -> None:
                    answers["call"] = await http.post(
                        "/mcp", json=call, headers={**HEADERS, "x-label": "call"}
                    )

                async with anyio.create_task_group() as tg:
                    tg.start_soon(run_call)
                    await async_wait_until(lambda: stats_now(registry).total_in_flight)
                    answers["cancel"] = await http.post(
                        "/mcp", json=cancel, headers={**HEADERS, "x-label": "cancel"}
                    )
                metrics = await http.get("/metrics")
    finally:
        await registry.aclose()

    assert answers["cancel"].status_code == 202
    assert answers["call"].json()["error"]["code"] == REQUEST_CANCELLED
    assert SESSION_ID not in metrics.text
    parsed = samples(metrics.text)
    assert value(parsed, "mcp_cancellation_cancelled_total", scope_kind="session") == 1

    spans = span_exporter.get_finished_spans()
    (server_span,) = [s for s in spans if s.name == "cancel"]
    # The cancellation is an event on the server span of the POST that cancelled.
    (cancel_event,) = [e for e in server_span.events if e.name == otel_names.EVENT_CANCEL]
    attributes = dict(cancel_event.attributes or {})
    assert attributes["mcp.method.name"] == "notifications/cancelled"
    assert attributes["mcp_cancellation.request.id"] == "77"
    assert "jsonrpc.request.id" not in attributes  # not the span of request 77
    assert attributes["mcp_cancellation.scope_kind"] == "session"
    assert attributes["mcp_cancellation.reason"] == "user pressed stop"
    for span in spans:
        assert all(SESSION_ID not in str(v) for v in (span.attributes or {}).values())
