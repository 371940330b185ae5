"""Malformed bodies: each gets a clear JSON-RPC error or 202, never a 500; the server keeps
serving and no row is left behind."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ..jsonrpc import SSE_AND_JSON, call_body, jsonrpc_messages
from ._helpers import Harness, Serve

pytestmark = pytest.mark.e2e

MEGABYTE = 1024 * 1024


def _j(value: Any) -> bytes:
    return json.dumps(value).encode()


def _cancel(params: Any) -> bytes:
    return _j({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params})


def _call(request_id: Any, params: Any = None) -> bytes:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call"}
    if params is not None:
        body["params"] = params
    return _j(body)


def _nested(depth: int) -> bytes:
    return b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"x":' + (
        b"[" * depth + b"]" * depth + b"}}"
    )


#: (name, body, extra headers). At least 40, covering the issue's categories.
MALFORMED: list[tuple[str, bytes, dict[str, str]]] = [
    # not JSON
    ("empty", b"", {}),
    ("text", b"not json at all", {}),
    ("truncated", b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{', {}),
    ("binary", b"\xff\xfe\x00\x01garbage\x80", {}),
    ("bom", b'\xef\xbb\xbf{"jsonrpc":"2.0","method":"notifications/cancelled"}', {}),
    ("nan", b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":NaN}}', {}),
    # JSON, not an object
    ("null", b"null", {}),
    ("number", b"42", {}),
    ("string", b'"notifications/cancelled"', {}),
    ("empty array", b"[]", {}),
    ("batch of cancels", _j([json.loads(_cancel({"requestId": 1}))] * 3), {}),
    ("batch of calls", _j([json.loads(_call(1, {"name": "echo"}))] * 2), {}),
    # wrong envelope
    ("empty object", b"{}", {}),
    ("no method", _j({"jsonrpc": "2.0", "id": 1}), {}),
    ("method is a number", _j({"jsonrpc": "2.0", "method": 42}), {}),
    ("method is empty", _j({"jsonrpc": "2.0", "id": 3, "method": ""}), {}),
    ("unknown method", _j({"jsonrpc": "2.0", "id": 4, "method": "no/such/method"}), {}),
    ("wrong jsonrpc", _j({"jsonrpc": "1.0", "method": "notifications/cancelled"}), {}),
    ("posted response", _j({"jsonrpc": "2.0", "id": 1, "result": {}}), {}),
    ("posted error", _j({"jsonrpc": "2.0", "id": 1, "error": {"code": 1, "message": "x"}}), {}),
    # notifications/cancelled with bad params
    ("missing params", _j({"jsonrpc": "2.0", "method": "notifications/cancelled"}), {}),
    ("params null", _cancel(None), {}),
    ("params array", _cancel([1, 2]), {}),
    ("params string", _cancel("requestId=1"), {}),
    ("params number", _cancel(7), {}),
    ("params empty", _cancel({}), {}),
    ("id null", _cancel({"requestId": None}), {}),
    ("id bool", _cancel({"requestId": True}), {}),
    ("id float", _cancel({"requestId": 1.5}), {}),
    ("id object", _cancel({"requestId": {"id": 1}}), {}),
    ("id array", _cancel({"requestId": [1]}), {}),
    ("id 257 bytes", _cancel({"requestId": "x" * 257}), {}),
    ("id 129 two-byte chars", _cancel({"requestId": "é" * 129}), {}),
    ("id huge int", _cancel({"requestId": 10**300}), {}),
    (
        "id enormous int literal",
        b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":'
        b'{"requestId":' + b"9" * 5000 + b"}}",
        {},
    ),
    (
        "id lone surrogate",
        b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"\\ud800"}}',
        {},
    ),
    ("id negative", _cancel({"requestId": -1}), {}),
    ("id with NUL", _cancel({"requestId": "a\x00b"}), {}),
    # reasons
    ("1 MB reason", _cancel({"requestId": 1, "reason": "r" * MEGABYTE}), {}),
    (
        "1 MB control reason",
        _cancel({"requestId": 1, "reason": "\x00\x1b[31m\u202e" * (MEGABYTE // 4)}),
        {},
    ),
    ("reason object", _cancel({"requestId": 1, "reason": {"nested": [1, 2, {"x": None}]}}), {}),
    (
        "reason bidi and zero-width",
        _cancel({"requestId": 1, "reason": "\u2066ok\u200b\u2069\ufeff"}),
        {},
    ),
    ("reason null", _cancel({"requestId": 1, "reason": None}), {}),
    # nested garbage
    ("nested garbage params", _cancel({"requestId": 1, "junk": [[[{"a": [None, {}]}]]] * 50}), {}),
    ("deep nesting", _nested(100_000), {}),
    ("moderate nesting", _nested(500), {}),
    # requests with bad ids or params (the SDK answers these)
    ("call id null", _call(None, {"name": "echo", "arguments": {"text": "x"}}), {}),
    ("call id bool", _call(True, "params"), {}),
    ("call id float", _call(2.5, "params"), {}),
    ("call id object", _call({"a": 1}, "params"), {}),
    ("call id too long", _call("y" * 300, "not an object"), {}),
    ("call params string", _call(11, "not an object"), {}),
    ("call no params", _call(12), {}),
    ("call name number", _call(13, {"name": 42}), {}),
    # other protocol versions and headers
    ("unknown version", _cancel({"requestId": 1}), {"mcp-protocol-version": "1999-01-01"}),
    ("modern cancel", _cancel({"requestId": 1}), {"mcp-protocol-version": "2026-07-28"}),
    ("modern bad params", _cancel("x"), {"mcp-protocol-version": "2026-07-28"}),
    ("text/plain", _cancel({"requestId": 1}), {"content-type": "text/plain"}),
]

assert len(MALFORMED) >= 40


def check_answer(response: httpx.Response) -> None:
    """A clear JSON-RPC error, or 202, never a server error."""
    assert response.status_code < 500, (response.status_code, response.text[:300])
    if response.status_code == 202:
        return
    if response.status_code == 413:  # the body limit, answered before any parsing
        return
    messages = jsonrpc_messages(response)
    errors = [m for m in messages if "error" in m]
    assert errors, (response.status_code, response.text[:300])
    assert isinstance(errors[-1]["error"]["code"], int)
    assert isinstance(errors[-1]["error"]["message"], str)


async def assert_still_serving(harness: Harness, http: httpx.AsyncClient) -> None:
    response = await http.post(
        harness.url, json=call_body(99, "echo", {"text": "alive"}), headers=SSE_AND_JSON
    )
    assert response.status_code == 200
    assert "alive" in response.text
    await harness.wait_empty()
    assert harness.cancellations == []


async def test_malformed_bodies(
    serve: Serve, http: httpx.AsyncClient, flavour: str, json_response: bool
) -> None:
    harness = serve(flavour, json_response=json_response)
    for name, body, headers in MALFORMED:
        response = await http.post(harness.url, content=body, headers={**SSE_AND_JSON, **headers})
        try:
            check_answer(response)
        except AssertionError as exc:  # pragma: no cover - shows which body failed
            raise AssertionError(f"{name}: {exc}") from None
    await assert_still_serving(harness, http)


async def test_invalid_cancel_params_get_32602_with_null_id(
    serve: Serve, http: httpx.AsyncClient
) -> None:
    harness = serve("sdk", json_response=True)
    for params in (
        None,
        [1],
        "x",
        {},
        {"requestId": None},
        {"requestId": 1.5},
        {"requestId": "z" * 300},
    ):
        response = await http.post(harness.url, content=_cancel(params), headers=SSE_AND_JSON)
        assert response.status_code == 400
        assert response.json()["id"] is None
        assert response.json()["error"]["code"] == -32602
    await assert_still_serving(harness, http)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


def test_random_cancel_params_never_fail(serve: Serve) -> None:
    harness = serve("sdk", json_response=True)
    with httpx.Client(timeout=20) as client:

        @settings(
            max_examples=150,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        )
        @given(
            params=JSON_VALUES
            | st.fixed_dictionaries({"requestId": JSON_VALUES, "reason": JSON_VALUES})
        )
        def check(params: Any) -> None:
            response = client.post(harness.url, content=_cancel(params), headers=SSE_AND_JSON)
            assert response.status_code in (202, 400), response.text
            if response.status_code == 400:
                assert response.json()["error"]["code"] == -32602

        check()
        stats = harness.stats()
        assert stats.total_rows == 0
        assert stats.total_in_flight == 0
