"""OpenTelemetry bridge: the registry's signals as spans, span events and metrics.

:func:`instrument` connects to :mod:`mcp_cancellation.signals`; :func:`uninstrument`
disconnects. Signals are sent synchronously by the task that called the registry, so the
*current* span is the caller's: the HTTP server span of a ``notifications/cancelled`` POST
(the middleware answers it in front of the SDK), the SDK's request span for
``registry.cancel()`` from tool code, no parent for the janitor.

Spans and events (tracer ``mcp_cancellation``, the package version). The package's own
attributes live under ``mcp_cancellation.*``; ``mcp.method.name`` is the MCP semantic
convention's, and is set only where it names the message being handled:

``mcp_cancellation.cancel`` (event on the current span)
    a recorded cancellation, on the span of the message that cancelled (the server span of
    a ``notifications/cancelled`` POST, the tool's span for ``registry.cancel()``, the
    cancelled request's own span for a disconnect): ``mcp_cancellation.request.id`` (the id
    of the *cancelled* request; ``jsonrpc.request.id`` is not set, since the span may not
    be that request's), ``mcp.method.name`` (``notifications/cancelled`` when it came from
    one), ``mcp_cancellation.source`` (``notification``, ``disconnect``, ``api`` or
    ``other``), ``mcp_cancellation.scope_kind``, ``mcp_cancellation.scope`` (session scopes
    hashed), ``mcp_cancellation._reason`` (when given; sanitised and truncated). With no
    recording span there is no trace of it (a span per cancel cost ~20 µs and a root trace
    each); the counter ``mcp_cancellation.cancelled`` counts every one.
``mcp_cancellation.cleanup`` (span)
    one cleanup pass, starting and ending when the pass did: ``mcp_cancellation.removed``,
    ``mcp_cancellation.in_flight_removed``.
``mcp_cancellation.evict`` (event on the current span)
    the global cap evicted rows of one scope, on the span of the insert that evicted: one
    event per scope of the batch, for its :data:`EVICT_EVENTS` largest scopes (the first
    evicted), so that a flood's batch of thousands of one-row scopes leaves the span room
    for its own events: ``mcp_cancellation.scope_kind``, ``mcp_cancellation.scope``,
    ``mcp_cancellation.evicted``. An event, for the reason a rejection is one: a flood must
    not become thousands of traces. The counter ``mcp_cancellation.evicted`` counts every
    evicted row, traced or not.
``mcp_cancellation.rejected`` (event on the current span)
    a refused cancellation: ``error.type`` (``quota`` or ``invalid_request_id``),
    ``mcp_cancellation.scope_kind``, ``mcp_cancellation.scope``. An event, not a span: a
    flood of rejections must not create a trace per rejection; the counter
    ``mcp_cancellation.rejected`` counts every one, traced or not.

Metrics (meter ``mcp_cancellation``): exactly the catalogue of
:mod:`mcp_cancellation.telemetry.prometheus._catalogue`, so that an OpenTelemetry Prometheus
exporter (or a collector receiving OTLP) produces the names, label names and types the
shipped dashboards and alerts query. Instrument ``mcp_cancellation.X`` becomes the
Prometheus metric ``mcp_cancellation_X`` (counters ``..._total``); attributes are the
Prometheus label names (``scope_kind``, ``reason``, ``table``, ``storage``, ``operation``,
``scope``). Gauges are observed at collection time for an instrumented registry, from one
read of its storage per collection (at most ``stats_timeout`` seconds, on a Redis storage's
own loop). The histogram ``mcp_cancellation.cleanup.duration`` (seconds, buckets from 1 ms
to 10 s) is OpenTelemetry's only. See ``docs/metrics.md``.
"""

from __future__ import annotations

from ..._extras import requires

with requires("otel", "The OpenTelemetry bridge (mcp_cancellation.telemetry.otel)"):
    import opentelemetry.metrics  # noqa: F401 - the bridge needs the API

from ._bridge import EVICT_EVENTS, OpenTelemetryBridge, instrument, instrumented, uninstrument

__all__ = ["EVICT_EVENTS", "OpenTelemetryBridge", "instrument", "instrumented", "uninstrument"]
