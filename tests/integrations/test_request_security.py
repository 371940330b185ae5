"""Requests a web page can forge cancel nothing: a cross-site ``text/plain`` POST, a
DNS-rebinding Host."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest

from mcp_cancellation import CancellationMiddleware, CancellationRegistry
from mcp_cancellation.storage._memory import MemoryStorage

from ..jsonrpc import SSE_AND_JSON, call_body, cancel_body, final_message
from ..support import UvicornThread, async_wait_until
from ._helpers import Serve, ToolLog, build_sdk_app, refused_then_cancelled

pytestmark = pytest.mark.e2e


async def test_cross_site_text_plain_cancel_is_not_recorded(
    serve: Serve, http: httpx.AsyncClient
) -> None:
    """A web page can make the user's browser POST a ``text/plain`` body cross-site
    without a CORS preflight (a "simple" request), from the user's own address. The SDK
    refuses any POST that is not ``application/json``; the middleware must not record a
    cancellation from one either."""
    harness = serve("sdk", json_response=True)
    answers: dict[str, httpx.Response] = {}

    async def call() -> None:
        answers["call"] = await http.post(
            harness.url, json=call_body(3, "poll", {"seconds": 1.5}), headers=SSE_AND_JSON
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        await harness.wait_started()
        forged = await http.post(
            harness.url,
            content=json.dumps(cancel_body(3, "csrf")).encode(),
            headers={
                "content-type": "text/plain;charset=UTF-8",
                "origin": "https://evil.example",
                "accept": "*/*",
            },
        )
        assert forged.status_code == 400  # the SDK's status for that Content-Type
        assert forged.json()["error"]["code"] == -32600
    message = final_message(answers["call"])
    assert "result" in message, message
    assert harness.cancellations == []
    await harness.wait_empty()


async def test_dns_rebinding_host_cannot_cancel() -> None:
    """A page rebound to the loopback server sends same-origin JSON with a foreign Host:
    the SDK refuses it (421) for its own endpoint, and so must the middleware for the
    notifications/cancelled it answers in front of the SDK."""
    from mcp_cancellation._demo import build_demo_app

    registry = CancellationRegistry(janitor_interval=None)
    app = build_demo_app(registry, json_response=True, host="127.0.0.1")
    with UvicornThread(app, proxy_headers=False) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            results: list[httpx.Response] = []

            async def call() -> None:
                body = call_body(1, "slow_count", {"seconds": 2})
                results.append(await client.post("/mcp", json=body, headers=SSE_AND_JSON))

            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                assert isinstance(registry.storage, MemoryStorage)
                storage: MemoryStorage = registry.storage
                await async_wait_until(lambda: storage.stats_from_thread(0).in_flight)
                evil = {
                    **SSE_AND_JSON,
                    "host": f"evil.example:{server.port}",
                    "origin": f"http://evil.example:{server.port}",
                }
                refused = await client.post("/mcp", json=cancel_body(1, None), headers=evil)
                assert refused.status_code == 421
            answer = json.loads(results[0].text)
            assert "error" not in answer, answer
            assert answer["result"]["isError"] is False
            assert storage.stats_from_thread(0).rows == {}


@pytest.mark.parametrize(
    ("foreign", "status"),
    [
        ({"host": "evil.example"}, 421),
        ({"origin": "http://evil.example"}, 403),
    ],
    ids=["host", "origin"],
)
async def test_the_sdk_apps_own_rebinding_protection_guards_cancels(
    serve: Serve,
    http: httpx.AsyncClient,
    json_response: bool,
    foreign: dict[str, str],
    status: int,
) -> None:
    """Without ``transport_security`` given, the middleware applies the Host/Origin
    settings of the SDK app it wraps (on by default for a loopback server): a rebound
    page's notification gets the SDK's refusal and cancels nothing, and the caller's own
    then cancels the call. (FastMCP turns the SDK's check off and runs its own guard,
    ``host_origin_protection``, as a middleware in front of the user's.)"""
    harness = serve("sdk", json_response=json_response)
    await refused_then_cancelled(harness, http, cancel_body("job", "rebound"), foreign, status)


@pytest.mark.parametrize("shape", ["outside a CORS middleware", "after authentication", "mounted"])
async def test_the_sdk_apps_settings_are_found_through_other_layers(shape: str) -> None:
    """The SDK app's Host/Origin settings are found wherever the middleware sits: around
    another middleware that wraps the SDK app, installed inside the SDK's app, or around
    an app that mounts the SDK's under a prefix."""
    import contextlib
    from collections.abc import AsyncIterator

    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.cors import CORSMiddleware
    from starlette.routing import Mount

    registry = CancellationRegistry(janitor_interval=None)
    sdk_app = build_sdk_app(ToolLog(), json_response=True)
    path = "/mcp"
    if shape == "after authentication":
        sdk_app.user_middleware.append(Middleware(CancellationMiddleware, registry=registry))
        app: Any = sdk_app
    elif shape == "mounted":

        @contextlib.asynccontextmanager
        async def lifespan(_: Starlette) -> AsyncIterator[None]:
            async with sdk_app.router.lifespan_context(sdk_app):  # the SDK's session manager
                yield

        path = "/api/mcp"
        outer = Starlette(routes=[Mount("/api", app=sdk_app)], lifespan=lifespan)
        app = CancellationMiddleware(outer, registry=registry, path=path)
    else:
        app = CancellationMiddleware(
            CORSMiddleware(sdk_app, allow_origins=["https://ui.example"]), registry=registry
        )
    with UvicornThread(app, proxy_headers=False) as server:
        async with httpx.AsyncClient(timeout=20) as client:
            url = server.url + path
            rebound = {**SSE_AND_JSON, "host": "evil.example"}
            refused = await client.post(url, json=cancel_body(1), headers=rebound)
            assert refused.status_code == 421, refused.text
            accepted = await client.post(url, json=cancel_body(1), headers=SSE_AND_JSON)
            assert accepted.status_code == 202, accepted.text


async def test_an_app_the_search_cannot_read_is_served(caplog: pytest.LogCaptureFixture) -> None:
    """Looking for the SDK's session manager must not fail a request: an app whose
    attributes raise is served, tracked and cancellable as before (checked less)."""

    class Opaque:
        @property
        def routes(self) -> list[Any]:
            raise RuntimeError("not readable")

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                return
            while (await receive()).get("more_body"):
                pass
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"{}"})

    registry = CancellationRegistry(janitor_interval=None)
    app = CancellationMiddleware(Opaque(), registry=registry)
    with UvicornThread(app, proxy_headers=False) as server:
        async with httpx.AsyncClient(timeout=20) as client:
            url = server.url + "/mcp"
            for _ in range(2):
                answer = await client.post(
                    url, json=call_body(1, "echo", {"text": "x"}), headers=SSE_AND_JSON
                )
                assert answer.status_code == 200
            cancel = await client.post(url, json=cancel_body(1), headers=SSE_AND_JSON)
            assert cancel.status_code == 202
    failures = [r for r in caplog.records if "session manager" in r.getMessage()]
    assert len(failures) == 1, failures  # tried once, not on every request
