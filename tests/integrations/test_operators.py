"""An operator lists the calls in flight and cancels a scope's calls: through the admin app
of one process on the memory storage, and through ``mcp-cancellation inspect``/``cancel``
on a Redis table shared by two workers. Real uvicorn servers, real HTTP, the real CLI."""

from __future__ import annotations

import json

import anyio
import httpx
import pytest

from mcp_cancellation import CancellationRegistry, MemoryStorage
from mcp_cancellation.admin import admin_app
from mcp_cancellation.scope import ScopeLabeler

from ..support import UvicornThread, redis_url
from ._helpers import Calls, Serve, cli, workers_sharing

pytestmark = pytest.mark.e2e

TOKEN = "operator-secret-token"
SECRETS = {"alice": "alice-session-0b3f6d7e", "bob": "bob-session-9c1a2e44"}


async def test_the_admin_app_lists_and_cancels_one_scope_and_refuses_bad_tokens(
    serve: Serve, http: httpx.AsyncClient
) -> None:
    # A quota of one row: the operator's cancellations of alice's two calls ignore it.
    registry = CancellationRegistry(MemoryStorage(), janitor_interval=None, max_rows_per_scope=1)
    harness = serve(
        json_response=True,
        registry=registry,
        tools=["poll"],
        session_resolver=lambda scope: SECRETS.get(
            dict(scope["headers"]).get(b"x-user", b"").decode()
        ),
    )
    label = ScopeLabeler()
    alice, bob = (label("session:" + SECRETS[name]) for name in ("alice", "bob"))
    with UvicornThread(admin_app(registry, token=TOKEN)) as admin:
        url = admin.url
        async with anyio.create_task_group() as tg:
            calls = Calls(tg)
            calls.start(http, harness, "a1", **{"x-user": "alice"})
            calls.start(http, harness, "a2", **{"x-user": "alice"})
            calls.start(http, harness, "-b1", **{"x-user": "bob"})
            await harness.wait_started(3)

            for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": TOKEN}):
                refused = await http.get(url + "/requests", headers=headers)
                assert refused.status_code == 401
                assert refused.headers["www-authenticate"] == "Bearer"
            auth = {"authorization": f"Bearer {TOKEN}"}
            listed = await http.get(url + "/requests", headers=auth)
            assert listed.status_code == 200
            rows = listed.json()["requests"]
            assert sorted((r["scope"], r["id"], r["tool"]) for r in rows) == sorted(
                [(alice, "a1", "poll"), (alice, "a2", "poll"), (bob, "-b1", "poll")]
            )
            assert {r["worker"] for r in rows} == {registry.instance_id}
            ages = [r["age"] for r in rows]
            assert ages == sorted(ages, reverse=True)
            only_bob = await http.get(url + "/requests", params={"scope": bob}, headers=auth)
            assert [r["id"] for r in only_bob.json()["requests"]] == ["-b1"]

            code, out, err = await cli("inspect", "--url", url, "--token", TOKEN)
            assert code == 0, err
            assert all(shown in out for shown in (alice, bob, "a1", "a2", "-b1"))

            cancelled = await http.post(
                url + "/cancel", json={"scope": alice, "all": True, "reason": "ops"}, headers=auth
            )
            assert cancelled.status_code == 200
            assert sorted(r["id"] for r in cancelled.json()["cancelled"]) == ["a1", "a2"]
            await calls.ended("a1", "a2")
            assert "-b1" not in calls.answers  # bob's call runs on
            assert [c["method"] for c in harness.cancellations] == ["operator", "operator"]

            code, out, err = await cli(
                # (an id that starts with '-' is written with '=')
                "cancel",
                "--url",
                url,
                "--token",
                TOKEN,
                "--scope",
                bob,
                "--id=-b1",
            )
            assert code == 0, err
            assert "cancelled 1 request(s)" in out
            await calls.ended("-b1")

            code, out, err = await cli("inspect", "--url", url, "--token", "wrong")
            assert code == 1
            assert "401" in err
            assert "--token" in err  # how to pass it
        for text in (listed.text, cancelled.text, out, err):
            assert not any(secret in text for secret in SECRETS.values())
    await harness.wait_empty()


@pytest.mark.redis
@pytest.mark.parametrize(
    "backend", ["redis", pytest.param("redis-cluster", marks=pytest.mark.cluster)]
)
async def test_inspect_lists_every_worker_s_calls_once_and_cancel_stops_one_scope(
    serve: Serve,
    http: httpx.AsyncClient,
    other_http: httpx.AsyncClient,
    backend: str,
    request: pytest.FixtureRequest,
) -> None:
    url = redis_url(backend, request)
    async with workers_sharing(url) as registries:
        prefix = registries[0].storage.prefix  # type: ignore[attr-defined]
        workers = [serve(json_response=True, registry=r, tools=["poll"]) for r in registries]
        async with anyio.create_task_group() as tg:
            calls = Calls(tg)
            for n, worker in enumerate(workers):
                calls.start(http, worker, f"near-{n}")
                calls.start(other_http, worker, f"far-{n}")
            for worker in workers:
                await worker.wait_started(2)

            code, out, err = await cli("inspect", "--redis", url, "--prefix", prefix, "--json")
            assert code == 0, err
            rows = json.loads(out)["requests"]
            assert sorted((r["scope"], r["id"]) for r in rows) == [
                ("ip:127.0.0.1", "near-0"),
                ("ip:127.0.0.1", "near-1"),
                ("ip:127.0.0.2", "far-0"),
                ("ip:127.0.0.2", "far-1"),
            ]
            assert {r["worker"] for r in rows} == {r.instance_id for r in registries}
            assert all(r["tool"] == "poll" and not r["cancelled"] for r in rows)

            code, out, err = await cli(
                *("cancel", "--redis", url, "--prefix", prefix),
                *("--scope", "ip:127.0.0.2", "--all", "--reason", "runaway"),
            )
            assert code == 0, err
            assert "cancelled 2 request(s)" in out
            await calls.ended("far-0", "far-1")
            assert calls.answers["far-0"]["error"]["data"] == {"reason": "runaway"}

            code, out, err = await cli(
                "inspect", "--redis", url, "--prefix", prefix, "--scope", "ip:127.0.0.1"
            )
            assert code == 0, err
            assert "near-0" in out
            assert "near-1" in out
            assert "far-" not in out
            code, out, err = await cli(
                *("cancel", "--redis", url, "--prefix", prefix),
                *("--scope", "ip:127.0.0.1", "--tool", "poll"),
            )
            assert code == 0, err
            await calls.ended("near-0", "near-1")


async def test_an_unreachable_storage_is_a_clear_error() -> None:
    code, _, err = await cli("inspect", "--redis", "redis://127.0.0.1:1/0")
    assert code == 1
    assert "cannot reach the storage" in err
    assert "Traceback" not in err
