"""Tasks (SEP-2663) on real servers, driven by raw JSON-RPC: created on one worker, read,
cancelled and answered on the other (two uvicorn worker processes on one Redis, one
Redis Cluster, or one partitioned table; one server on the memory storage), each scope
seeing only its own tasks."""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from typing import Any

import httpx
import pytest

from mcp_cancellation import CancellationRegistry, MemoryStorage

from ..support import RedisServer, UvicornThread, async_wait_until
from ._app import build_tasks_app
from ._workers import QUOTA, Caller, TaskWorker

pytestmark = pytest.mark.e2e


def address() -> str:
    """A fresh caller address: each test's scope of its own (``ip:198.18.x.y``)."""
    n = uuid.uuid4().int
    return f"198.18.{n % 250 + 1}.{(n >> 8) % 250 + 1}"


async def until_status(
    caller: Caller, url: str, task_id: str, statuses: set[str], within: float = 15.0
) -> dict[str, Any]:
    """Poll ``tasks/get`` until the task is in one of *statuses*."""
    seen: dict[str, Any] = {}

    async def reached() -> bool:
        seen.update(await caller.get(url, task_id))
        return seen["status"] in statuses

    await async_wait_until(reached, within=within, interval=0.02)
    return seen


async def test_a_task_created_on_one_worker_is_read_at_once_and_completes_on_the_other(
    servers: tuple[str, str], http: httpx.AsyncClient
) -> None:
    a, b = servers
    caller = Caller(http, address())
    answer = await caller.rpc(a, "tools/call", {"name": "slow_count", "arguments": {"n": 30}})
    created = answer["result"]
    assert created["resultType"] == "task"
    assert created["status"] == "working"
    # 192 random bits, in hex: no id starts with "-" (the CLI's --id would take it for
    # an option).
    assert re.fullmatch("[0-9a-f]{48}", created["taskId"]), created["taskId"]
    for name in ("createdAt", "lastUpdatedAt", "ttlMs", "pollIntervalMs"):
        assert name in created, created
    first = await caller.get(b, created["taskId"])  # durably recorded before the answer
    assert first["resultType"] == "complete"
    assert first["status"] in ("working", "completed")
    running = await until_status(caller, b, created["taskId"], {"working"}, within=5)
    assert running["createdAt"] == created["createdAt"]
    done = await until_status(caller, b, created["taskId"], {"completed"})
    assert done["result"]["content"][0]["text"] == "counted to 30"
    assert done["result"]["isError"] is False
    assert done["statusMessage"].startswith("counted ")  # ctx.report_progress


async def test_tasks_cancel_on_the_other_worker_stops_the_tool(
    servers: tuple[str, str], http: httpx.AsyncClient
) -> None:
    a, b = servers
    caller = Caller(http, address())
    task_id = await caller.create(a, "slow_count", {"n": 100_000, "step": 0.01})

    async def counting() -> bool:
        return "statusMessage" in await caller.get(b, task_id)

    await async_wait_until(counting, within=10)
    started = time.monotonic()
    answer = await caller.rpc(b, "tasks/cancel", {"taskId": task_id})
    assert answer["result"] == {"resultType": "complete", **_meta(answer)}
    ended = await until_status(caller, b, task_id, {"cancelled"}, within=10)
    assert time.monotonic() - started < 5
    assert "result" not in ended
    assert "error" not in ended
    # Cancelling an ended task is acknowledged and changes nothing.
    again = await caller.rpc(a, "tasks/cancel", {"taskId": task_id})
    assert again["result"]["resultType"] == "complete"
    assert (await caller.get(a, task_id))["status"] == "cancelled"


async def test_a_tool_that_ignores_its_cancellation_is_stopped_after_kill_after(
    servers: tuple[str, str], http: httpx.AsyncClient
) -> None:
    a, b = servers
    caller = Caller(http, address())
    task_id = await caller.create(a, "stubborn", {"seconds": 60})
    await caller.rpc(b, "tasks/cancel", {"taskId": task_id})
    await until_status(caller, b, task_id, {"cancelled"}, within=20)


async def test_input_requests_are_answered_through_the_other_worker(
    servers: tuple[str, str], http: httpx.AsyncClient
) -> None:
    a, b = servers
    caller = Caller(http, address())
    task_id = await caller.create(a, "ask_name", {})
    waiting = await until_status(caller, b, task_id, {"input_required"})
    (key,) = waiting["inputRequests"]
    request = waiting["inputRequests"][key]
    assert request["method"] == "elicitation/create"
    assert request["params"]["message"] == "Your name?"
    # An unknown key and a malformed answer are ignored; the right one goes through.
    update = {
        "taskId": task_id,
        "inputResponses": {
            "nope": {"action": "accept"},
            key: {"action": "accept", "content": {"name": "Ada"}},
        },
    }
    answer = await caller.rpc(b, "tasks/update", update)
    assert answer["result"]["resultType"] == "complete"

    async def next_question() -> bool:
        found = await caller.get(a, task_id)
        return found["status"] == "input_required" and key not in found["inputRequests"]

    await async_wait_until(next_question, within=15)
    second = await caller.get(a, task_id)
    (key2,) = second["inputRequests"]
    assert second["inputRequests"][key2]["params"]["message"] == "Again?"
    # The first key, already answered, is not answered again.
    stale = {"taskId": task_id, "inputResponses": {key: {"action": "decline"}}}
    await caller.rpc(a, "tasks/update", stale)
    await caller.rpc(
        a, "tasks/update", {"taskId": task_id, "inputResponses": {key2: {"action": "decline"}}}
    )
    done = await until_status(caller, b, task_id, {"completed"})
    assert done["result"]["content"][0]["text"] == "Ada & decline"


async def test_another_scope_cannot_read_cancel_or_answer_a_task(
    servers: tuple[str, str], http: httpx.AsyncClient
) -> None:
    a, b = servers
    owner, other = Caller(http, address()), Caller(http, address())
    task_id = await owner.create(a, "ask_name", {})
    await until_status(owner, a, task_id, {"input_required"})
    unknown = uuid.uuid4().hex
    for method, params in [
        ("tasks/get", {}),
        ("tasks/cancel", {}),
        ("tasks/update", {"inputResponses": {"input-1": {"action": "decline"}}}),
    ]:
        theirs = await other.post(b, method, {"taskId": task_id, **params})
        none = await other.post(b, method, {"taskId": unknown, **params})
        assert theirs.status_code == none.status_code
        assert theirs.json()["error"] == none.json()["error"]
        assert theirs.json()["error"]["code"] == -32602
    # Untouched: still waiting for its owner's answer, which completes it.
    waiting = await owner.get(b, task_id)
    assert waiting["status"] == "input_required"
    (key,) = waiting["inputRequests"]
    answer = {key: {"action": "accept", "content": {"name": "Bo"}}}
    await owner.rpc(b, "tasks/update", {"taskId": task_id, "inputResponses": answer})
    second = await until_status(owner, b, task_id, {"input_required"})
    while key in second.get("inputRequests", {}):
        second = await until_status(owner, b, task_id, {"input_required"})
    (key2,) = second["inputRequests"]
    await owner.rpc(b, "tasks/update", {"taskId": task_id, "inputResponses": {key2: answer[key]}})
    done = await until_status(owner, a, task_id, {"completed"})
    assert done["result"]["content"][0]["text"] == "Bo & Bo"


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"taskId": 7},
        {"taskId": None},
        {"taskId": ["a"]},
        {"taskId": ""},
        {"taskId": "x" * 10_000},
        {"taskId": "no-such-task"},
    ],
    ids=["missing", "int", "null", "list", "empty", "10kB", "unknown"],
)
async def test_bad_task_ids_get_invalid_params_on_every_method(
    servers: tuple[str, str], http: httpx.AsyncClient, params: dict[str, Any]
) -> None:
    a, _ = servers
    caller = Caller(http, address())
    for method in ("tasks/get", "tasks/cancel", "tasks/update"):
        extra: dict[str, Any] = {"inputResponses": {}} if method == "tasks/update" else {}
        answer = await caller.rpc(a, method, {**params, **extra})
        assert answer["error"]["code"] == -32602, (method, answer)


@pytest.mark.parametrize("responses", [None, [], "x", 5, {str(i): {} for i in range(100)}])
async def test_bad_input_responses_get_invalid_params(
    servers: tuple[str, str], http: httpx.AsyncClient, responses: object
) -> None:
    a, _ = servers
    caller = Caller(http, address())
    task_id = await caller.create(a, "slow_count", {"n": 3})
    answer = await caller.rpc(a, "tasks/update", {"taskId": task_id, "inputResponses": responses})
    assert answer["error"]["code"] == -32602


async def test_a_client_that_does_not_declare_the_extension_gets_plain_calls_and_32021(
    servers: tuple[str, str], http: httpx.AsyncClient
) -> None:
    a, _ = servers
    plain = Caller(http, address(), declare=False)
    answer = await plain.rpc(a, "tools/call", {"name": "slow_count", "arguments": {"n": 2}})
    assert answer["result"]["content"][0]["text"] == "counted to 2"
    assert answer["result"].get("resultType", "complete") == "complete"
    for method in ("tasks/get", "tasks/cancel", "tasks/update"):
        refused = await plain.rpc(a, method, {"taskId": "anything", "inputResponses": {}})
        assert refused["error"]["code"] == -32021, refused
    # A tool not opted in runs as a plain call even for a client that declares it.
    declared = Caller(http, address())
    quick = await declared.rpc(a, "tools/call", {"name": "quick", "arguments": {}})
    assert quick["result"]["content"][0]["text"] == "quick"


async def test_past_the_scope_quota_a_call_runs_as_a_plain_call(
    servers: tuple[str, str], http: httpx.AsyncClient
) -> None:
    a, b = servers
    caller, neighbour = Caller(http, address()), Caller(http, address())
    held = [await caller.create(a, "stubborn", {"seconds": 60}) for _ in range(QUOTA)]
    answer = await caller.rpc(b, "tools/call", {"name": "sized", "arguments": {"size": 3}})
    assert answer["result"]["content"][0]["text"] == "xxx"  # run at once, not a task
    # Another scope is not crowded out.
    await neighbour.create(b, "sized", {"size": 1})
    for task_id in held:
        await caller.rpc(b, "tasks/cancel", {"taskId": task_id})


async def test_a_result_over_the_size_limit_fails_the_task(
    servers: tuple[str, str], http: httpx.AsyncClient
) -> None:
    a, b = servers
    caller = Caller(http, address())
    task_id = await caller.create(a, "sized", {"size": 2 * 1024 * 1024})
    failed = await until_status(caller, b, task_id, {"failed"})
    assert failed["error"]["code"] == -32603
    assert "larger than the server keeps" in failed["error"]["message"]
    # A tool error is a completed task whose result says so.
    broken = await caller.create(a, "broken", {})
    done = await until_status(caller, b, broken, {"completed"})
    assert done["result"]["isError"] is True


async def test_mcp_name_must_match_the_task_id_when_sent(
    servers: tuple[str, str], http: httpx.AsyncClient
) -> None:
    a, _ = servers
    caller = Caller(http, address())
    task_id = await caller.create(a, "sized", {"size": 1})
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tasks/get",
        "params": {
            "taskId": task_id,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {
                    "extensions": {"io.modelcontextprotocol/tasks": {}}
                },
            },
        },
    }
    headers = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": "tasks/get",
        "x-forwarded-for": caller.address,
    }
    wrong = await http.post(f"{a}/mcp", json=body, headers={**headers, "mcp-name": "other"})
    assert wrong.json()["error"]["code"] == -32020
    right = await http.post(f"{a}/mcp", json=body, headers={**headers, "mcp-name": task_id})
    assert right.json()["result"]["taskId"] == task_id


def _meta(answer: dict[str, Any]) -> dict[str, Any]:
    meta = answer["result"].get("_meta")
    return {"_meta": meta} if meta is not None else {}


@pytest.mark.redis
async def test_a_killed_workers_tasks_fail_and_its_completed_tasks_survive_a_restart(
    redis_server: RedisServer, http: httpx.AsyncClient, task_worker: type[TaskWorker]
) -> None:
    prefix = f"tasks-{uuid.uuid4().hex[:8]}"
    a = task_worker(redis_server.url, prefix, heartbeat_ttl=1.0)
    b = task_worker(redis_server.url, prefix, heartbeat_ttl=1.0)
    restarted: TaskWorker | None = None
    try:
        caller = Caller(http, address())
        finished = await caller.create(a.url, "sized", {"size": 5})
        await until_status(caller, b.url, finished, {"completed"})
        running = await caller.create(a.url, "stubborn", {"seconds": 120})
        await until_status(caller, b.url, running, {"working"})
        a.kill()
        started = time.monotonic()
        failed = await until_status(caller, b.url, running, {"failed"}, within=15)
        assert time.monotonic() - started < 10  # the heartbeat bound (1 s) and a margin
        assert failed["error"]["message"] == "The worker running this task stopped."
        restarted = task_worker(redis_server.url, prefix, heartbeat_ttl=1.0)
        for url in (restarted.url, b.url):
            kept = await caller.get(url, finished)
            assert kept["status"] == "completed"
            assert kept["result"]["content"][0]["text"] == "xxxxx"
    finally:
        for worker in (a, b, restarted):
            if worker is not None:
                worker.stop()


async def test_a_task_is_gone_after_its_ttl(http: httpx.AsyncClient) -> None:
    registry = CancellationRegistry(MemoryStorage(), janitor_interval=None)
    with UvicornThread(build_tasks_app(registry, ttl=0.5)) as server:
        caller = Caller(http, address())
        task_id = await caller.create(server.url, "sized", {"size": 1})
        assert (await caller.get(server.url, task_id))["ttlMs"] == 500

        async def gone() -> bool:
            answer = await caller.rpc(server.url, "tasks/get", {"taskId": task_id})
            return "error" in answer and answer["error"]["code"] == -32602

        await async_wait_until(gone, within=5)


@pytest.mark.redis
async def test_a_task_is_gone_after_its_ttl_on_redis(
    redis_server: RedisServer, http: httpx.AsyncClient
) -> None:
    worker = TaskWorker(redis_server.url, f"tasks-{uuid.uuid4().hex[:8]}", ttl=0.5)
    try:
        caller = Caller(http, address())
        task_id = await caller.create(worker.url, "sized", {"size": 1})

        async def gone() -> bool:
            answer = await caller.rpc(worker.url, "tasks/get", {"taskId": task_id})
            return "error" in answer and answer["error"]["code"] == -32602

        await async_wait_until(gone, within=5)
        # The scope's quota counts it no more either.
        for _ in range(QUOTA):
            await caller.create(worker.url, "sized", {"size": 1})
    finally:
        worker.stop()


async def test_metrics_count_tasks_by_tool_and_status_and_task_rejections_by_scope(
    servers: tuple[str, str], http: httpx.AsyncClient
) -> None:
    a, b = servers
    caller = Caller(http, address())

    async def idle() -> bool:  # no task of an earlier test may end during this one
        scrapes = [await _scrape(http, url) for url in {a, b}]
        return all(_value(text, "tasks_running") == 0 for text in scrapes)

    await async_wait_until(idle, within=15)
    before = await _scrape(http, a)
    done = await caller.create(a, "sized", {"size": 1})
    await until_status(caller, b, done, {"completed"})
    held = [await caller.create(a, "stubborn", {"seconds": 60}) for _ in range(QUOTA - 1)]
    await caller.rpc(a, "tools/call", {"name": "sized", "arguments": {"size": 1}})  # refused
    for task_id in held:
        await caller.rpc(b, "tasks/cancel", {"taskId": task_id})
    for task_id in held:
        await until_status(caller, b, task_id, {"cancelled"})

    async def counted() -> bool:
        after = await _scrape(http, a)
        return (
            _delta(before, after, 'tasks_ended_total{status="completed",tool="sized"}') == 1
            and _delta(before, after, 'tasks_ended_total{status="cancelled",tool="stubborn"}')
            == QUOTA - 1
        )

    await async_wait_until(counted, within=10)
    await caller.get(a, done)
    after = await _scrape(http, a)
    assert _delta(before, after, 'tasks_created_total{tool="sized"}') == 1
    assert _delta(before, after, 'tasks_rejected_total{reason="quota",scope_kind="ip"}') == 1
    assert f'reason="task_quota",scope="ip:{caller.address}"' in after  # the abusive scope
    assert 'mcp_cancellation_task_duration_seconds_count{status="cancelled",tool="stubborn"}' in (
        after
    )
    running = [
        line
        for line in after.splitlines()
        if line.startswith("mcp_cancellation_tasks_running{") and 'tool="stubborn"' in line
    ]
    assert all(line.endswith(" 0.0") for line in running), running  # (none: no series)
    # tasks/get is on the standard MCP metric, under its own method name.
    assert 'mcp_method_name="tasks/get"' in after


async def _scrape(http: httpx.AsyncClient, url: str) -> str:
    response = await http.get(f"{url}/metrics")
    assert response.status_code == 200
    return response.text


def _value(text: str, series: str) -> float:
    name, _, labels = series.partition("{")
    wanted = set(labels.rstrip("}").split(",")) if labels else set()
    total = 0.0
    for line in text.splitlines():
        if not line.startswith("mcp_cancellation_" + name + "{"):
            continue
        got = set(line[line.index("{") + 1 : line.rindex("}")].split(","))
        if wanted <= got:
            total += float(line.rsplit(" ", 1)[1])
    return total


def _delta(before: str, after: str, series: str) -> float:
    return _value(after, series) - _value(before, series)


@pytest.mark.redis
@pytest.mark.parametrize("busy_ms", [300, 800])
async def test_a_cancel_sent_while_the_owner_s_loop_is_busy_stops_the_task(
    redis_server: RedisServer, http: httpx.AsyncClient, busy_ms: int
) -> None:
    """The owning worker's loop is held by CPU-bound work (``/hog``) from right after the
    task's creation, longer than ``track_wait`` in the second case; ``tasks/cancel`` goes
    to the idle worker meanwhile, is answered, and the task ends ``cancelled`` once the
    owner's loop is free again (never ``completed``)."""
    prefix = f"tasks-{uuid.uuid4().hex[:8]}"
    owner = TaskWorker(redis_server.url, prefix)
    idle = TaskWorker(redis_server.url, prefix)
    try:
        caller = Caller(http, address())
        for _ in range(3):
            task_id = await caller.create(owner.url, "slow_count", {"n": 300, "step": 0.01})
            hog = asyncio.create_task(http.post(f"{owner.url}/hog?ms={busy_ms}"))
            answer = await caller.rpc(idle.url, "tasks/cancel", {"taskId": task_id})
            assert answer["result"]["resultType"] == "complete"
            assert (await hog).status_code == 204
            ended = await until_status(caller, idle.url, task_id, {"cancelled", "completed"})
            assert ended["status"] == "cancelled", ended
    finally:
        owner.stop()
        idle.stop()


async def test_every_server_request_inside_a_task_becomes_an_input_request(
    servers: tuple[str, str], http: httpx.AsyncClient
) -> None:
    a, b = servers
    caller = Caller(http, address())
    task_id = await caller.create(a, "server_requests", {})
    sampled = {
        "role": "assistant",
        "content": {"type": "text", "text": "hello"},
        "model": "test-model",
        "stopReason": "endTurn",
    }
    answers = {
        "sampling/createMessage": sampled,
        "roots/list": {"roots": [{"uri": "file:///tmp", "name": "tmp"}]},
        "elicitation/create": {"action": "accept"},
    }
    asked: list[str] = []
    while len(asked) < 3:
        waiting = await until_status(caller, b, task_id, {"input_required", "completed"})
        assert waiting["status"] == "input_required", waiting
        pending = waiting.get("inputRequests", {})
        fresh = [k for k in pending if k not in asked]
        if not fresh:
            continue
        (key,) = fresh
        method = pending[key]["method"]
        asked.append(key)
        if method == "elicitation/create":
            assert pending[key]["params"]["mode"] == "url"
            assert pending[key]["params"]["url"] == "https://example.invalid/login"
        answer = {key: answers[method]}
        await caller.rpc(a, "tasks/update", {"taskId": task_id, "inputResponses": answer})
    done = await until_status(caller, b, task_id, {"completed"})
    # The log message went to the server's log, not to a stream the task does not have.
    assert done["result"]["content"][0]["text"] == "hello | 1 roots | accept"


async def test_a_partial_answer_leaves_the_other_question_visible(
    servers: tuple[str, str], http: httpx.AsyncClient
) -> None:
    a, b = servers
    caller = Caller(http, address())
    task_id = await caller.create(a, "ask_both", {})

    async def both_asked() -> bool:
        found = await caller.get(b, task_id)
        return len(found.get("inputRequests", {})) == 2

    await async_wait_until(both_asked, within=15)
    questions = (await caller.get(b, task_id))["inputRequests"]
    first, second = sorted(questions)
    accept = {"action": "accept", "content": {"name": "Al"}}
    await caller.rpc(b, "tasks/update", {"taskId": task_id, "inputResponses": {first: accept}})

    async def first_taken() -> bool:  # the tool has its answer, and removed the question
        found = await caller.get(a, task_id)
        return first not in found.get("inputRequests", {first: None})

    await async_wait_until(first_taken, within=15)
    found = await caller.get(a, task_id)
    assert found["status"] == "input_required"
    assert list(found["inputRequests"]) == [second]
    await caller.rpc(a, "tasks/update", {"taskId": task_id, "inputResponses": {second: accept}})
    done = await until_status(caller, b, task_id, {"completed"})
    assert done["result"]["content"][0]["text"] == "Al & Al"
