"""A loopback OTLP/HTTP receiver for the telemetry tests (helpers, no tests)."""

from __future__ import annotations

import http.server
import threading
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

__all__ = ["Receiver"]


class Receiver:
    """A loopback OTLP/HTTP receiver (``/v1/traces``, ``/v1/metrics``, protobuf)."""

    def __init__(self) -> None:
        self.traces: list[ExportTraceServiceRequest] = []
        self.metrics: list[ExportMetricsServiceRequest] = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                reply: Any
                if self.path == "/v1/traces":
                    receiver.traces.append(ExportTraceServiceRequest.FromString(body))
                    reply = ExportTraceServiceResponse()
                elif self.path == "/v1/metrics":
                    receiver.metrics.append(ExportMetricsServiceRequest.FromString(body))
                    reply = ExportMetricsServiceResponse()
                else:
                    self.send_error(404)
                    return
                data = reply.SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def span_names(self) -> set[str]:
        return {
            span.name
            for request in self.traces
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        }

    def event_names(self) -> dict[str, set[str]]:
        """Span name -> the names of the events on it."""
        return {
            span.name: {event.name for event in span.events}
            for request in self.traces
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        }

    def metric_points(self) -> dict[str, set[frozenset[str]]]:
        """Metric name -> the attribute key sets of its points."""
        out: dict[str, set[frozenset[str]]] = {}
        for request in self.metrics:
            for resource in request.resource_metrics:
                for scope in resource.scope_metrics:
                    for metric in scope.metrics:
                        kind = metric.WhichOneof("data")
                        points = getattr(metric, kind).data_points
                        keys = out.setdefault(metric.name, set())
                        for point in points:
                            keys.add(frozenset(a.key for a in point.attributes))
        return out
