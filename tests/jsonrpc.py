"""JSON-RPC messages as the tests send and read them over plain HTTP: the bodies of a tool
call and a cancellation, the headers of a client at a protocol version, and the messages
of a JSON or SSE response."""

from __future__ import annotations

import json
from typing import Any

import httpx

#: The protocol version of the handshake era, and the first without a handshake.
HANDSHAKE = "2025-11-25"
MODERN = "2026-07-28"

SSE_AND_JSON = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def call_body(request_id: object, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }


def cancel_body(request_id: object, reason: str | None = "test") -> dict[str, Any]:
    params: dict[str, Any] = {"requestId": request_id}
    if reason is not None:
        params["reason"] = reason
    return {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params}


def jsonrpc_messages(response: httpx.Response) -> list[dict[str, Any]]:
    """The JSON-RPC messages of a response, JSON or SSE."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        return [
            json.loads(line[5:].strip())
            for line in response.text.splitlines()
            if line.startswith("data:") and line[5:].strip()
        ]
    if not response.content:
        return []
    decoded = response.json()
    return decoded if isinstance(decoded, list) else [decoded]


def final_message(response: httpx.Response) -> dict[str, Any]:
    """The response (result or error) among a response's JSON-RPC messages."""
    messages = [m for m in jsonrpc_messages(response) if "result" in m or "error" in m]
    assert len(messages) == 1, response.text
    return messages[0]


def versioned_call(
    version: str, request_id: object, tool: str, arguments: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, str]]:
    """A ``tools/call`` body and headers as a client at *version* sends them."""
    body = call_body(request_id, tool, arguments)
    headers = {**SSE_AND_JSON, "mcp-protocol-version": version}
    if version == MODERN:
        body["params"]["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": version,
            "io.modelcontextprotocol/clientCapabilities": {},
        }
        headers.update({"mcp-method": "tools/call", "mcp-name": tool})
    return body, headers
