"""Behind a ``root_path`` (``uvicorn --root-path``, an app mounted under a prefix)
requests are still tracked and cancellable."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import httpx
import pytest

from mcp_cancellation import REQUEST_CANCELLED, CancellationRegistry
from mcp_cancellation.integrations._middleware import CancellationMiddleware
from mcp_cancellation.storage._memory import MemoryStorage

from ..jsonrpc import SSE_AND_JSON, call_body, cancel_body, final_message
from ..support import UvicornThread, async_wait_until
from ._helpers import ToolLog, build_sdk_app

pytestmark = pytest.mark.e2e


@pytest.fixture
def root_path_server() -> Iterator[tuple[UvicornThread, CancellationRegistry, ToolLog]]:
    """The SDK app behind the middleware, served with ``--root-path /api`` (as behind a
    proxy that strips a prefix): uvicorn puts the root path in front of ``path``."""
    log = ToolLog()
    registry = CancellationRegistry(MemoryStorage(), janitor_interval=None)
    app = CancellationMiddleware(build_sdk_app(log, json_response=True), registry=registry)
    server = UvicornThread(app, proxy_headers=False, root_path="/api")
    server.start()
    try:
        yield server, registry, log
    finally:
        server.stop()


async def test_root_path_requests_are_tracked_and_cancellable(
    root_path_server: tuple[UvicornThread, CancellationRegistry, ToolLog],
    http: httpx.AsyncClient,
) -> None:
    """The SDK routes on the path without ``root_path``; the middleware must too, or it
    silently tracks nothing and a cancellation is ignored."""
    server, registry, log = root_path_server
    url = server.url + "/mcp"
    answers: dict[str, httpx.Response] = {}

    async def call() -> None:
        answers["call"] = await http.post(
            url, json=call_body(7, "poll", {"seconds": 4}), headers=SSE_AND_JSON
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        await async_wait_until(lambda: log.started() != [], within=5)
        assert log.started() == ["7"]  # tracked: the tool sees its request's token
        answer = await http.post(url, json=cancel_body(7, "stop"), headers=SSE_AND_JSON)
        assert answer.status_code == 202
    assert final_message(answers["call"])["error"]["code"] == REQUEST_CANCELLED
    storage = registry.storage
    assert isinstance(storage, MemoryStorage)
    await async_wait_until(lambda: storage.stats_from_thread(0).total_in_flight == 0, within=5)
    assert storage.stats_from_thread(0).total_rows == 0
