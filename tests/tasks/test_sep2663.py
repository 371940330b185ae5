"""SEP-2663's server rows, by raw JSON-RPC on real servers (two workers on Redis, the
Cluster, a partitioned table; one server on memory): the extension only from 2026-07-28
on, required tools, ``tools/list``'s task support, input rounds before the task,
``subscriptions/listen``, ``Mcp-Name``, refusals a caller can see, and why a task ended."""

from __future__ import annotations

import base64
from typing import Any

import httpx
import pytest
from mcp.shared.inbound import encode_header_value

from mcp_cancellation import CancellationRegistry, MemoryStorage

from ..jsonrpc import HANDSHAKE, MODERN
from ..support import UvicornThread
from ._app import build_tasks_app
from ._workers import EXTENSION, QUOTA, Caller
from .test_tasks import address, until_status

pytestmark = pytest.mark.e2e

REQUIRED: dict[str, Any] = {"requiredCapabilities": {"extensions": {EXTENSION: {}}}}


async def test_before_2026_07_28_an_opt_in_is_not_a_task_request(
    servers: tuple[str, str], http: httpx.AsyncClient
) -> None:
    a, _ = servers
    old = Caller(http, address(), version=HANDSHAKE)  # declares the extension in _meta
    answer = await old.rpc(a, "tools/call", {"name": "sized", "arguments": {"size": 2}})
    assert answer["result"]["content"][0]["text"] == "xx"
    assert "taskId" not in answer["result"]
    # Whatever their params: the methods do not exist at that version (-32601), never a
    # complaint about their params (-32602).
    shapes: list[dict[str, Any]] = [{"taskId": "x", "inputResponses": {}}, {"taskId": "x"}, {}]
    shapes += [{"taskId": 5}, {"taskId": "x", "inputResponses": "no"}]
    for method in ("tasks/get", "tasks/cancel", "tasks/update"):
        for params in shapes:
            refused = await old.rpc(a, method, params)
            assert refused["error"]["code"] == -32601, (method, params, refused)


@pytest.mark.parametrize("version", [HANDSHAKE, MODERN])
async def test_a_required_tool_called_without_the_extension_gets_32021(
    servers: tuple[str, str], http: httpx.AsyncClient, version: str
) -> None:
    a, _ = servers
    plain = Caller(http, address(), declare=False, version=version)
    answer = await plain.rpc(a, "tools/call", {"name": "required_job", "arguments": {}})
    assert answer["error"]["code"] == -32021
    assert answer["error"]["data"] == REQUIRED
    # An optional tool runs plain; with the extension the required one is a task.
    optional = await plain.rpc(a, "tools/call", {"name": "sized", "arguments": {"size": 1}})
    assert optional["result"]["content"][0]["text"] == "x"
    declared = Caller(http, address())
    task_id = await declared.create(a, "required_job", {})
    done = await until_status(declared, a, task_id, {"completed"})
    assert done["result"]["content"][0]["text"] == "required done"


async def test_tools_list_states_each_tool_s_task_support(
    servers: tuple[str, str], http: httpx.AsyncClient
) -> None:
    a, _ = servers
    answer = await Caller(http, address()).rpc(a, "tools/list", {})
    support = {
        t["name"]: t.get("execution", {}).get("taskSupport") for t in answer["result"]["tools"]
    }
    assert support["slow_count"] == "optional"
    assert support["required_job"] == "required"
    assert support["quick"] == "forbidden"


async def test_input_rounds_come_before_the_task(
    servers: tuple[str, str], http: httpx.AsyncClient
) -> None:
    a, b = servers
    caller = Caller(http, address())
    first = await caller.rpc(a, "tools/call", {"name": "input_first", "arguments": {}})
    round1 = first["result"]
    assert round1["resultType"] == "input_required", first
    assert "taskId" not in round1
    (key,) = round1["inputRequests"]
    assert round1["inputRequests"][key]["method"] == "elicitation/create"
    answer = {key: {"action": "accept", "content": {"name": "Alice"}}}
    params = {"name": "input_first", "arguments": {"seconds": 0.3}, "inputResponses": answer}
    second = await caller.rpc(b, "tools/call", params)
    round2 = second["result"]
    assert round2["resultType"] == "task", second
    assert "requestState" not in round2
    assert "inputRequests" not in round2
    done = await until_status(caller, a, round2["taskId"], {"completed"})
    assert done["result"]["content"][0]["text"] == "hello Alice"


async def test_subscriptions_listen_for_task_ids_needs_the_extension(
    servers: tuple[str, str], http: httpx.AsyncClient
) -> None:
    a, _ = servers
    plain = Caller(http, address(), declare=False)
    params = {"notifications": {"taskIds": ["any"], "toolsListChanged": True}}
    answer = await plain.rpc(a, "subscriptions/listen", params)
    assert answer["error"]["code"] == -32021
    assert answer["error"]["data"] == REQUIRED


async def test_an_encoded_mcp_name_header_is_decoded(
    servers: tuple[str, str], http: httpx.AsyncClient
) -> None:
    a, _ = servers
    caller = Caller(http, address())
    task_id = await caller.create(a, "sized", {"size": 1})
    # (A client may encode any value: the server decodes before it compares.)
    encoded = f"=?base64?{base64.b64encode(task_id.encode()).decode()}?="
    right = await caller.rpc(a, "tasks/get", {"taskId": task_id}, {"mcp-name": encoded})
    assert right["result"]["taskId"] == task_id
    other = encode_header_value("s\u00f8meone-else")
    assert other.startswith("=?base64?")
    wrong = await caller.rpc(a, "tasks/get", {"taskId": task_id}, {"mcp-name": other})
    assert wrong["error"]["code"] == -32020


async def test_a_strict_server_requires_mcp_name(http: httpx.AsyncClient) -> None:
    registry = CancellationRegistry(MemoryStorage(), janitor_interval=None)
    with UvicornThread(build_tasks_app(registry, require_mcp_name=True)) as server:
        caller = Caller(http, address())
        task_id = await caller.create(server.url, "sized", {"size": 1})
        missing = await caller.rpc(server.url, "tasks/get", {"taskId": task_id})
        assert missing["error"]["code"] == -32020
        sent = await caller.rpc(server.url, "tasks/get", {"taskId": task_id}, {"mcp-name": task_id})
        assert sent["result"]["taskId"] == task_id


async def test_past_the_quota_a_required_tool_says_so_and_an_optional_one_runs_plain(
    servers: tuple[str, str], http: httpx.AsyncClient
) -> None:
    a, b = servers
    caller = Caller(http, address())
    held = [await caller.create(a, "stubborn", {"seconds": 60}) for _ in range(QUOTA)]
    try:
        required = await caller.rpc(b, "tools/call", {"name": "required_job", "arguments": {}})
        assert required["error"]["code"] == -32603
        assert "max_tasks_per_scope" in required["error"]["message"]
        optional = await caller.rpc(b, "tools/call", {"name": "sized", "arguments": {"size": 2}})
        result: dict[str, Any] = optional["result"]
        assert result["content"][0]["text"] == "xx"
        assert result["_meta"]["io.github.mcp-cancellation/taskRejected"] == "quota"
    finally:
        for task_id in held:
            await caller.rpc(b, "tasks/cancel", {"taskId": task_id})


async def test_a_task_says_why_it_ended(servers: tuple[str, str], http: httpx.AsyncClient) -> None:
    a, b = servers
    caller = Caller(http, address())
    too_big = await caller.create(a, "sized", {"size": 2 * 1024 * 1024})
    failed = await until_status(caller, b, too_big, {"failed"})
    assert failed["statusMessage"] == failed["error"]["message"]
    assert "larger than the server keeps" in failed["statusMessage"]
    running = await caller.create(a, "slow_count", {"n": 100_000, "step": 0.01})
    await caller.rpc(b, "tasks/cancel", {"taskId": running})
    cancelled = await until_status(caller, b, running, {"cancelled"})
    assert cancelled["statusMessage"] == "Cancelled by the client (tasks/cancel)."
