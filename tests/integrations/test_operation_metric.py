"""The standard MCP server metric, ``mcp.server.operation.duration``, from the middleware
through both bridges: every request counted once (``initialize`` too), a cancelled call
told apart by ``error.type`` ``cancelled``, a failed one by its JSON-RPC error code or
``tool_error``, tool names and methods bounded."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
from prometheus_client import CollectorRegistry

from mcp_cancellation import (
    REQUEST_CANCELLED,
    CancellationMiddleware,
    CancellationRegistry,
    MemoryStorage,
)
from mcp_cancellation.telemetry.otel import OpenTelemetryBridge
from mcp_cancellation.telemetry.prometheus import PrometheusBridge

from ..jsonrpc import HANDSHAKE, MODERN, SSE_AND_JSON, call_body, final_message
from ..support import UvicornThread, async_wait_until
from ._helpers import Serve, start_and_cancel

pytestmark = pytest.mark.e2e

VERSION = {"mcp-protocol-version": HANDSHAKE}


def prometheus_counts(collector: CollectorRegistry) -> dict[tuple[str, str, str, str], float]:
    """``_count`` of the histogram by (method, tool, error type, protocol version)."""
    counts: dict[tuple[str, str, str, str], float] = {}
    for family in collector.collect():
        for sample in family.samples:
            if sample.name == "mcp_server_operation_duration_seconds_count":
                labels = sample.labels
                assert labels["network_transport"] == "tcp"
                key = (
                    labels["mcp_method_name"],
                    labels["gen_ai_tool_name"],
                    labels["error_type"],
                    labels["mcp_protocol_version"],
                )
                counts[key] = sample.value
    return counts


def otel_counts(reader: InMemoryMetricReader) -> dict[tuple[str, str, str, str], int]:
    counts: dict[tuple[str, str, str, str], int] = {}
    data = reader.get_metrics_data()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name != "mcp.server.operation.duration":
                    continue
                assert metric.unit == "s"
                for point in metric.data.data_points:
                    assert isinstance(point, HistogramDataPoint)
                    attributes: dict[str, Any] = dict(point.attributes or {})
                    assert attributes.pop("network.transport") == "tcp"
                    key = (
                        str(attributes.get("mcp.method.name", "")),
                        str(attributes.get("gen_ai.tool.name", "")),
                        str(attributes.get("error.type", "")),
                        str(attributes.get("mcp.protocol.version", "")),
                    )
                    counts[key] = point.count
                    assert list(point.explicit_bounds)[:3] == [0.01, 0.02, 0.05]
    return counts


@pytest.mark.parametrize("json_response", [True, False], ids=["json", "sse"])
async def test_calls_are_counted_once_and_a_cancelled_call_is_told_apart(
    serve: Serve, http: httpx.AsyncClient, json_response: bool
) -> None:
    registry = CancellationRegistry(MemoryStorage(), janitor_interval=None)
    collector = CollectorRegistry()
    prometheus = PrometheusBridge(registry, collector_registry=collector).install()
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    otel = OpenTelemetryBridge(registry, meter_provider=provider).install()
    try:
        harness = serve(json_response=json_response, registry=registry, tools=["echo", "poll"])
        headers = {**SSE_AND_JSON, **VERSION}
        for n in range(2):
            answer = await http.post(
                harness.url, json=call_body(f"e{n}", "echo", {"text": "hi"}), headers=headers
            )
            assert final_message(answer)["result"]["isError"] is False
        listed = await http.post(
            harness.url,
            json={"jsonrpc": "2.0", "id": "l", "method": "tools/list"},
            headers={**SSE_AND_JSON, "mcp-protocol-version": "1999-01-01"},
        )
        assert listed.status_code in (200, 400)
        made_up = await http.post(
            harness.url,
            json={"jsonrpc": "2.0", "id": "x", "method": "made/up", "params": {}},
            headers=headers,
        )
        assert made_up.status_code in (200, 400, 404)
        initialize = {
            "protocolVersion": HANDSHAKE,
            "capabilities": {},
            "clientInfo": {"name": "metric-test", "version": "1"},
        }
        initialized = await http.post(  # no version header: the one it asks for counts
            harness.url,
            json={"jsonrpc": "2.0", "id": "i", "method": "initialize", "params": initialize},
            headers=SSE_AND_JSON,
        )
        assert "result" in final_message(initialized)
        bad_arguments = await http.post(
            harness.url, json=call_body("b", "echo", {}), headers=headers
        )
        assert final_message(bad_arguments)["result"]["isError"] is True
        unknown = await http.post(harness.url, json=call_body("u", "nope", {}), headers=headers)
        assert final_message(unknown)["result"]["isError"] is True
        cancelled = await start_and_cancel(harness, http, http, VERSION, VERSION)
        assert cancelled["error"]["code"] == REQUEST_CANCELLED
        await harness.wait_empty()

        expected = {
            ("initialize", "", "", "2025-11-25"): 1,
            ("tools/call", "echo", "", "2025-11-25"): 2,
            ("tools/call", "echo", "tool_error", "2025-11-25"): 1,
            ("tools/call", "other", "tool_error", "2025-11-25"): 1,
            ("tools/call", "poll", "cancelled", "2025-11-25"): 1,
            # The SDK answers a JSON-RPC error: its code is the error type.
            ("tools/list", "", "-32602", "other"): 1,
            ("other", "", "-32601", "2025-11-25"): 1,
        }
        assert prometheus_counts(collector) == expected
        assert otel_counts(reader) == expected
    finally:
        prometheus.uninstall()
        otel.uninstall()
        provider.shutdown()


@pytest.mark.parametrize(
    ("error_type", "label"),
    [
        ("-32602", "-32602"),
        ("tool_error", "tool_error"),
        ("-3260200", "_OTHER"),
        ("-32099", "_OTHER"),
        ("x" * 40, "_OTHER"),
    ],
)
async def test_an_error_type_is_bounded(error_type: str, label: str) -> None:
    """A token's ``error.type`` set by other code than the middleware cannot mint labels."""
    registry = CancellationRegistry(MemoryStorage(), janitor_interval=None)
    collector = CollectorRegistry()
    prometheus = PrometheusBridge(registry, collector_registry=collector).install()
    try:
        labels = {"mcp.method.name": "tools/call"}
        async with registry.request(1, "ip:192.0.2.1", labels=labels) as token:
            token.labels["error.type"] = error_type
        assert prometheus_counts(collector) == {("tools/call", "", label, ""): 1}
    finally:
        prometheus.uninstall()


async def test_a_request_no_integration_served_is_not_an_operation() -> None:
    """A block without an MCP method (a task's run, a library's own ``registry.request()``)
    is not a JSON-RPC request: neither bridge counts it on the MCP metric."""
    with both_bridges() as (registry, collector, reader):
        async with registry.request(1, "ip:192.0.2.1", tool="slow"):
            pass
        async with registry.request(2, "ip:192.0.2.1", labels={"error.type": "-32602"}):
            pass
        async with registry.request(3, "ip:192.0.2.1", labels={"mcp.method.name": "ping"}):
            pass
        assert prometheus_counts(collector) == {("ping", "", "", ""): 1}
        assert otel_counts(reader) == {("ping", "", "", ""): 1}


@contextlib.contextmanager
def both_bridges() -> Iterator[
    tuple[CancellationRegistry, CollectorRegistry, InMemoryMetricReader]
]:
    """A registry on memory with both bridges installed (a Prometheus collector registry
    and an OpenTelemetry in-memory reader of its own), uninstalled after."""
    registry = CancellationRegistry(MemoryStorage(), janitor_interval=None)
    collector = CollectorRegistry()
    prometheus = PrometheusBridge(registry, collector_registry=collector).install()
    reader = InMemoryMetricReader()
    otel = OpenTelemetryBridge(
        registry, meter_provider=MeterProvider(metric_readers=[reader])
    ).install()
    try:
        yield registry, collector, reader
    finally:
        prometheus.uninstall()
        otel.uninstall()


def hostile_app(registry: CancellationRegistry, json_response: bool) -> Any:
    """An SDK server whose tools answer what the caller asks: ``mirror`` returns its
    payload as structured output, ``fail`` raises a JSON-RPC error of any code."""
    from mcp.server.mcpserver import MCPServer
    from mcp.shared.exceptions import MCPError

    server = MCPServer("hostile", log_level="WARNING")

    @server.tool()
    async def mirror(payload: dict[str, Any]) -> dict[str, Any]:
        return payload

    @server.tool()
    async def fail(code: int) -> str:
        raise MCPError(code=code, message="as asked")

    app = server.streamable_http_app(stateless_http=True, json_response=json_response)
    return CancellationMiddleware(app, registry=registry, tools=["mirror", "fail"])


@pytest.mark.parametrize("json_response", [True, False], ids=["json", "sse"])
async def test_error_type_is_read_from_the_envelope_only_and_bounded(
    http: httpx.AsyncClient, json_response: bool
) -> None:
    """A tool's output that mentions an error or ``isError`` counts for nothing; a flood of
    distinct error codes makes no new series."""
    registry = CancellationRegistry(MemoryStorage(), janitor_interval=None)
    collector = CollectorRegistry()
    prometheus = PrometheusBridge(registry, collector_registry=collector).install()
    headers = {**SSE_AND_JSON, **VERSION}
    try:
        with UvicornThread(hostile_app(registry, json_response)) as server:
            url = server.url + "/mcp"
            forged = [
                {"error": {"code": 404, "message": "not found"}},
                {"isError": True},
                {"deep": {"isError": True}},
                {"text": '"error":{"code":-32602}'},
            ]
            for n, payload in enumerate(forged):
                answer = await http.post(
                    url, json=call_body(f"m{n}", "mirror", {"payload": payload}), headers=headers
                )
                result = final_message(answer)["result"]
                assert result["isError"] is False
                assert result["structuredContent"] == payload
            for code in range(-40_000, -40_000 + 300):
                answer = await http.post(
                    url, json=call_body(f"f{code}", "fail", {"code": code}), headers=headers
                )
                assert final_message(answer)["error"]["code"] == code
            answer = await http.post(
                url, json=call_body("known", "fail", {"code": -32602}), headers=headers
            )
            assert final_message(answer)["error"]["code"] == -32602
        assert prometheus_counts(collector) == {
            ("tools/call", "mirror", "", HANDSHAKE): len(forged),
            ("tools/call", "fail", "_OTHER", HANDSHAKE): 300,
            ("tools/call", "fail", "-32602", HANDSHAKE): 1,
        }
    finally:
        prometheus.uninstall()


def test_the_core_token_carries_no_http_field_and_the_labels_are_the_bridges_names() -> None:
    """The integration owns the operation's attributes (``token.labels``); the core token
    has no JSON-RPC or HTTP field; the names the middleware writes are those the bridges
    read."""
    from mcp_cancellation import RequestToken
    from mcp_cancellation.integrations import _exchange
    from mcp_cancellation.telemetry import _catalogue

    for field in ("method", "protocol_version", "error_type"):
        assert field not in RequestToken.__slots__
    written = (_exchange.METHOD_NAME, _exchange.PROTOCOL_VERSION, _exchange.ERROR_TYPE)
    read = (_catalogue.METHOD_NAME, _catalogue.PROTOCOL_VERSION, _catalogue.ERROR_TYPE)
    assert written == read
    assert _exchange.operation("tools/call", "2026-07-28") == {
        "mcp.method.name": "tools/call",
        "mcp.protocol.version": "2026-07-28",
    }


async def test_the_stateless_protocol_s_methods_are_counted_under_their_own_names(
    http: httpx.AsyncClient,
) -> None:
    """``server/discover`` and ``subscriptions/listen`` (2026-07-28, well-known methods of
    the conventions) through the middleware in front of a real SDK server: each counted
    under its name, never ``other``, and no label or attribute is ``mcp.session.id``."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("discoverable", log_level="WARNING")
    app = server.streamable_http_app(stateless_http=True, json_response=True)
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    with both_bridges() as (registry, collector, reader):
        with UvicornThread(CancellationMiddleware(app, registry=registry)) as running:
            url = running.url + "/mcp"
            headers = {**SSE_AND_JSON, "mcp-protocol-version": MODERN}
            discover = {"jsonrpc": "2.0", "id": 1, "method": "server/discover"}
            answer = await http.post(
                url,
                json={**discover, "params": {"_meta": meta}},
                headers={**headers, "mcp-method": "server/discover"},
            )
            assert "supportedVersions" in final_message(answer)["result"]
            listen = {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "subscriptions/listen",
                "params": {"_meta": meta, "notifications": {"toolsListChanged": True}},
            }
            async with http.stream(
                "POST", url, json=listen, headers={**headers, "mcp-method": "subscriptions/listen"}
            ) as stream:
                assert stream.status_code == 200
                async for line in stream.aiter_lines():
                    if line.startswith("data:"):
                        break  # (the acknowledgement: then the client closes its stream)

            def listened() -> bool:
                return ("subscriptions/listen", "", "cancelled", MODERN) in prometheus_counts(
                    collector
                )

            await async_wait_until(listened, within=10)
        expected = {
            ("server/discover", "", "", MODERN): 1,
            ("subscriptions/listen", "", "cancelled", MODERN): 1,
        }
        assert prometheus_counts(collector) == expected
        assert otel_counts(reader) == expected
        for family in collector.collect():
            for sample in family.samples:
                assert "mcp_session_id" not in sample.labels
