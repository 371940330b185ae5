"""``opentelemetry-instrument`` support: :class:`McpCancellationInstrumentor`.

Registered under the ``opentelemetry_instrumentor`` entry point, so that::

    opentelemetry-instrument uvicorn myserver:app

records the signals of every registry as spans and metrics with no code change (it calls
:func:`~mcp_cancellation.telemetry.otel.instrument` with the providers that
``opentelemetry-instrument`` configured). The table gauges belong to one registry each:
for them, call ``otel.instrument(registry)`` once in your code (that registry's counters
and spans are then recorded by its own bridge only, never twice) or serve ``/metrics``.

Needs ``pip install 'mcp-cancellation[otel-instrumentation]'``.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from .._extras import requires

with requires("otel-instrumentation", "McpCancellationInstrumentor"):
    from opentelemetry.instrumentation.instrumentor import (  # type: ignore[attr-defined]
        BaseInstrumentor,
    )

from .otel import instrument, uninstrument

__all__ = ["McpCancellationInstrumentor"]


class McpCancellationInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Instruments every :class:`~mcp_cancellation.CancellationRegistry` (spans, span
    events and counters); ``instrument(tracer_provider=..., meter_provider=...)``."""

    def instrumentation_dependencies(self) -> Collection[str]:
        return ()

    def _instrument(self, **kwargs: Any) -> None:
        instrument(
            tracer_provider=kwargs.get("tracer_provider"),
            meter_provider=kwargs.get("meter_provider"),
        )

    def _uninstrument(self, **kwargs: Any) -> None:
        uninstrument(None)
