"""``mcp-cancellation demo``: a real MCP server whose long tool calls can be cancelled.

A stateless Streamable HTTP server built with the ``mcp`` SDK's ``MCPServer``, behind
:class:`~mcp_cancellation.CancellationMiddleware` at ``/mcp``, with Prometheus metrics at
``/metrics``. Tools:

``slow_count(seconds)``
    counts to *seconds*, one step per second, reporting progress and polling
    :func:`~mcp_cancellation.raise_if_cancelled` every ``poll_interval``; a cancelled call
    answers JSON-RPC ``-32800``; for a client that declares the tasks extension
    (``io.modelcontextprotocol/tasks``, protocol 2026-07-28) it runs as a task, which
    ``tasks/get`` polls and ``tasks/cancel`` stops;
``stubborn_sleep(seconds)``
    sleeps without ever polling: only the middleware's ``stream_cancel_timeout`` stops it
    once its client has gone;
``ignores_cancellation(seconds)``
    works for *seconds* and never checks for cancellation, on purpose: cancelled from
    another request it keeps running, shows in ``mcp_cancellation_ignored_cancellations``
    once ``cancel_grace`` has passed, and ends as ``completed`` (the tool the
    ``MCPCancellationToolIgnoresCancellation`` alert is about);
``echo(text)``
    returns *text* at once (for benchmarks and smoke tests);
``whoami()``
    the cancellation scope the server derived for the caller.

Every cancelled request is logged in one INFO line when it ends (by the middleware: scope
kind, id, reason, and whether the tool stopped, was killed or completed anyway).
:func:`build_demo_app` returns the ASGI app, for tests and other programs.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shlex
import sys
from collections.abc import Sequence
from typing import Any

from ._asgi import ASGIApp, Receive, Scope, Send, send_response
from ._context import current_token, raise_if_cancelled
from ._errors import ConfigurationError
from ._extras import requires
from ._registry import CancellationRegistry
from .admin import ADMIN_TOKEN_ENV, admin_app
from .storage._base import Storage

with requires("mcp", "mcp-cancellation demo"):
    import anyio
    from mcp.server.mcpserver import Context, MCPServer

    from .integrations import (
        CancellationMiddleware,
        cancellable,
        loopback_transport_security,
        tool_names,
    )
    from .tasks import TasksExtension

__all__ = ["add_parser", "build_demo_app", "build_demo_server", "registry_from_args", "run"]

logger = logging.getLogger("mcp_cancellation.demo")

#: Seconds between two cancellation polls in ``slow_count``.
DEFAULT_POLL_INTERVAL = 0.1


def build_demo_server(
    *,
    poll_interval: float = DEFAULT_POLL_INTERVAL,
    registry: CancellationRegistry | None = None,
) -> MCPServer:
    """The demo's ``MCPServer`` and its tools (see the module docstring); with *registry*,
    ``slow_count`` also runs as a task (SEP-2663) for clients that declare the extension."""
    extensions: list[TasksExtension] = []
    if registry is not None:
        extensions.append(TasksExtension(registry, tools={"slow_count"}, poll_interval=0.5))
    server = MCPServer(
        "mcp-cancellation-demo",
        instructions="Call slow_count, then cancel it from another request or by hanging up.",
        log_level="WARNING",
        extensions=extensions,
        middleware=extensions,  # (tools/list states slow_count's task support)
    )

    @server.tool()
    @cancellable
    async def slow_count(seconds: int, ctx: Context) -> str:
        """Count to `seconds`, one per second, reporting progress; stops when cancelled."""
        seconds = max(0, min(int(seconds), 3600))
        steps_per_second = max(1, round(1 / poll_interval))
        for second in range(seconds):
            for _ in range(steps_per_second):
                raise_if_cancelled()
                await anyio.sleep(1 / steps_per_second)
            await ctx.report_progress(second + 1, seconds, f"counted to {second + 1}")
        raise_if_cancelled()
        return f"counted to {seconds}"

    @server.tool()
    async def stubborn_sleep(seconds: float) -> str:
        """Sleep for `seconds` without ever checking for cancellation."""
        await anyio.sleep(max(0.0, min(float(seconds), 3600.0)))
        return f"slept {seconds} s"

    @server.tool()
    async def ignores_cancellation(seconds: float) -> str:
        """Work for `seconds`, deliberately never checking for cancellation."""
        await anyio.sleep(max(0.0, min(float(seconds), 3600.0)))
        return f"worked {seconds} s and ignored any cancellation"

    @server.tool()
    async def echo(text: str) -> str:
        """Return `text` unchanged, at once."""
        return text

    @server.tool()
    async def whoami() -> str:
        """The cancellation scope this server derived for the caller."""
        token = current_token()
        return token.scope if token is not None else "untracked"

    return server


class _Router:
    """``/metrics`` to the metrics app, ``/admin/...`` to the admin app (when there is
    one), everything else (and lifespan) to the MCP app."""

    def __init__(
        self, mcp_app: ASGIApp, metrics: ASGIApp | None, admin: ASGIApp | None = None
    ) -> None:
        self.mcp_app = mcp_app
        self.metrics = metrics
        self.admin = admin

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path = str(scope.get("path", ""))
            if path in ("/metrics", "/metrics/"):
                if self.metrics is not None:
                    await self.metrics(scope, receive, send)
                    return
                await _not_found(send)
                return
            if self.admin is not None and path.startswith("/admin/"):
                await self.admin(scope, receive, send)
                return
        await self.mcp_app(scope, receive, send)


async def _not_found(send: Send) -> None:
    body = b"metrics unavailable: install mcp-cancellation[prometheus]\n"
    await send_response(send, 404, body, content_type=b"text/plain")


def _metrics_app(registry: CancellationRegistry, top_k: int) -> ASGIApp | None:
    try:
        from .telemetry.prometheus import metrics_app
    except ImportError as exc:
        logger.warning("no /metrics: %s", exc)
        return None
    app: ASGIApp = metrics_app(registry, top_k=top_k)
    return app


def build_demo_app(
    registry: CancellationRegistry,
    *,
    json_response: bool = False,
    trusted_proxies: Sequence[str] = (),
    stream_cancel_timeout: float | None = 10.0,
    poll_interval: float = DEFAULT_POLL_INTERVAL,
    host: str = "127.0.0.1",
    top_k: int = 20,
    admin_token: str | None = None,
) -> ASGIApp:
    """The demo's ASGI app: the MCP server at ``/mcp`` behind the middleware, and
    ``/metrics`` (404 when the Prometheus extra is missing; *top_k* scopes per gauge);
    with *admin_token* (else ``$MCP_CANCELLATION_ADMIN_TOKEN``), the admin app at
    ``/admin/requests`` and ``/admin/cancel``.

    *host* is the address the server listens on; the SDK turns on its DNS-rebinding
    protection (Host/Origin allow-list) for loopback hosts.
    """
    server = build_demo_server(poll_interval=poll_interval, registry=registry)
    security = loopback_transport_security(host)
    mcp_app = server.streamable_http_app(
        stateless_http=True,
        json_response=json_response,
        transport_security=security,
        host=host,
    )
    middleware = CancellationMiddleware(
        mcp_app,
        registry=registry,
        trusted_proxies=trusted_proxies,
        stream_cancel_timeout=stream_cancel_timeout,
        transport_security=security,
        tools=tool_names(server),
    )
    token = admin_token or os.environ.get(ADMIN_TOKEN_ENV)
    admin = admin_app(registry, token=token) if token else None
    return _Router(middleware, _metrics_app(registry, top_k), admin)


def client_command(url: str) -> str:
    """A command that runs ``mcp-cancellation client`` against *url*, as printed by the
    demo: ``./dev client`` from a checkout (``./dev demo`` says so through
    ``MCP_CANCELLATION_CLIENT_COMMAND``), else this interpreter's module, which works
    in any environment the demo itself runs in."""
    command = os.environ.get("MCP_CANCELLATION_CLIENT_COMMAND", "").strip()
    if not command:
        command = f"{shlex.quote(sys.executable)} -m mcp_cancellation client"
    return f"{command} --url {url}"


def _instructions(host: str, port: int, json_response: bool, *, metrics: bool = True) -> str:
    shown = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    if ":" in shown:
        shown = f"[{shown}]"
    url = f"http://{shown}:{port}/mcp"
    headers = "-H 'content-type: application/json' -H 'accept: application/json, text/event-stream'"
    call = (
        '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow_count",'
        '"arguments":{"seconds":30},"_meta":{"progressToken":1}}}'
    )
    cancel = (
        '{"jsonrpc":"2.0","method":"notifications/cancelled",'
        '"params":{"requestId":1,"reason":"changed my mind"}}'
    )
    mode = "JSON responses" if json_response else "SSE responses"
    if metrics:
        metrics_line = f"  metrics       http://{shown}:{port}/metrics\n"
    else:
        metrics_line = (
            "  metrics       none: pip install 'mcp-cancellation[prometheus]' for /metrics\n"
        )
    answer = "its JSON body is" if json_response else "its stream ends with"
    return f"""
mcp-cancellation demo: stateless Streamable HTTP MCP server ({mode})
  MCP endpoint  {url}
{metrics_line}  tools         slow_count(seconds), stubborn_sleep(seconds),
                ignores_cancellation(seconds), echo(text), whoami()

1. Start a 30-second call (terminal A):
     curl -N {url} {headers} \\
       -d '{call}'

2. Cancel it from another request of the same caller (terminal B):
     curl -i {url} {headers} \\
       -d '{cancel}'
   Terminal B gets 202; in terminal A {answer}
   {{"code":-32800,"message":"Request cancelled",...}} within a poll interval, and this
   log shows one line for the cancellation. Only the same caller (here: the same IP
   address) can cancel it; anyone else's notification is ignored.

3. Or press Ctrl-C in terminal A: a disconnect cancels the call too.

{_task_instructions(url, headers)}

Or let the Python client do all three:
     {client_command(url)}
"""


#: A 2026-07-28 request's ``_meta``: its protocol version, and its per-request
#: capabilities declaring the tasks extension.
TASK_META = (
    '{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
    '"io.modelcontextprotocol/clientCapabilities":'
    '{"extensions":{"io.modelcontextprotocol/tasks":{}}}}'
)


def _task_instructions(url: str, headers: str) -> str:
    """Step 4 of the banner: ``slow_count`` as a task, with curl (SEP-2663's raw wire)."""
    modern = f"{headers} -H 'mcp-protocol-version: 2026-07-28'"
    call = (
        '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"slow_count",'
        f'"arguments":{{"seconds":30}},"_meta":{TASK_META}}}}}'
    )

    def on_task(method: str, request_id: int) -> str:
        body = (
            f'{{"jsonrpc":"2.0","id":{request_id},"method":"{method}","params":'
            f'{{"taskId":"\'"$TASK"\'","_meta":{TASK_META}}}}}'
        )
        return (
            f"     curl -s {url} {modern} -H 'mcp-method: {method}' -H \"mcp-name: $TASK\" \\\n"
            f"       -d '{body}'"
        )

    return f"""4. Or run it as a task (SEP-2663, protocol 2026-07-28): answered at once with a
   task id, then polled and cancelled from any request, on any worker:
     curl -s {url} {modern} -H 'mcp-method: tools/call' -H 'mcp-name: slow_count' \\
       -d '{call}'
   Its answer is {{"result":{{"resultType":"task","taskId":"...",...}}}}. With that id:
     TASK=<the taskId>
{on_task("tasks/get", 3)}
{on_task("tasks/cancel", 4)}
   tasks/get shows "status":"working" and the progress in "statusMessage", then
   "cancelled" once tasks/cancel stopped it."""


def add_parser(subparsers: Any) -> None:
    """Register ``demo`` on the ``mcp-cancellation`` command."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "demo",
        help="serve a demo MCP server whose tool calls can be cancelled",
        description="Serve a stateless Streamable HTTP MCP server (the mcp SDK) behind "
        "CancellationMiddleware at /mcp, with Prometheus metrics at /metrics.",
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)"
    )
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    parser.add_argument(
        "--json-response",
        action="store_true",
        help="answer with a single JSON body instead of an SSE stream",
    )
    parser.add_argument(
        "--trusted-proxy",
        action="append",
        default=[],
        metavar="CIDR",
        help="believe X-Forwarded-For / Forwarded from this proxy (repeatable)",
    )
    parser.add_argument(
        "--max-rows",
        type=int,
        default=None,
        help="global cap on rows (default $MCP_CANCELLATION_MAX_ROWS, else 10000)",
    )
    parser.add_argument(
        "--max-rows-per-scope",
        type=int,
        default=None,
        help="quota of rows per caller scope (default $MCP_CANCELLATION_MAX_ROWS_PER_SCOPE, "
        "else 256)",
    )
    parser.add_argument(
        "--stream-cancel-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="cancel a disconnected request's work after this long (default 10)",
    )
    parser.add_argument(
        "--quota-mode",
        choices=["enforce", "shadow"],
        default=None,
        help="shadow: record cancellations past the quota and count them as would-be "
        "rejections (mode=shadow) instead of refusing them (default enforce)",
    )
    parser.add_argument(
        "--quota-override",
        action="append",
        default=[],
        metavar="SCOPE=N",
        help="the quota of one scope, e.g. principal:batch=1000 (repeatable)",
    )
    parser.add_argument(
        "--cancel-grace",
        type=float,
        default=None,
        metavar="SECONDS",
        help="a cancelled request still running after this long ignores its cancellation "
        "(mcp_cancellation_ignored_cancellations; default 5)",
    )
    parser.add_argument(
        "--redis",
        metavar="URL",
        default=None,
        help="keep the table in this Redis (redis://host:port/db, or a cluster: "
        "redis+cluster://host:port,host:port...), shared by every demo "
        "started with the same URL and prefix: try several workers or machines "
        "(needs mcp-cancellation[redis])",
    )
    parser.add_argument(
        "--redis-prefix",
        default=None,
        metavar="PREFIX",
        help="key prefix of the shared table in Redis (default mcp-cancellation)",
    )
    parser.add_argument(
        "--top-k", type=int, default=20, help="scopes exported per gauge on /metrics (default 20)"
    )
    parser.add_argument("--log-level", default="info", help="log level (default info)")
    parser.set_defaults(run=run)


def _storage(url: str | None, prefix: str | None) -> Storage | None:
    """The demo's storage: Redis at *url*, or ``None`` for the embedded memory storage."""
    if url is None:
        return None
    from .storage.redis import RedisStorage
    from .storage.redis._storage import DEFAULT_PREFIX

    return RedisStorage.from_url(url, prefix=prefix or DEFAULT_PREFIX)


def _overrides(entries: Sequence[str]) -> dict[str, int]:
    """``SCOPE=N`` entries (the scope may contain ``=``: the last one splits)."""
    overrides: dict[str, int] = {}
    for entry in entries:
        scope, sep, number = entry.rpartition("=")
        if not sep or not scope or not number.strip().isdigit():
            raise ConfigurationError(f"--quota-override {entry!r}: expected SCOPE=N")
        overrides[scope] = int(number)
    return overrides


def registry_from_args(args: argparse.Namespace) -> CancellationRegistry:
    """The demo's registry, as its command line describes it."""
    options: dict[str, Any] = {}
    for name in ("max_rows", "max_rows_per_scope", "cancel_grace", "quota_mode"):
        value = getattr(args, name, None)
        if value is not None:
            options[name] = value
    overrides = _overrides(getattr(args, "quota_override", []) or [])
    if overrides:
        options["quota_overrides"] = overrides
    return CancellationRegistry(_storage(args.redis, args.redis_prefix), **options)


def run(args: argparse.Namespace) -> int:
    """Serve the demo until interrupted."""
    import uvicorn

    level = getattr(logging, str(args.log_level).upper(), logging.INFO)
    logging.basicConfig(
        level=logging.WARNING,
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("mcp_cancellation").setLevel(level)
    try:
        registry = registry_from_args(args)
        app = build_demo_app(
            registry,
            json_response=args.json_response,
            trusted_proxies=args.trusted_proxy,
            stream_cancel_timeout=args.stream_cancel_timeout,
            host=args.host,
            top_k=args.top_k,
        )
    except (ConfigurationError, ImportError, ValueError) as exc:
        print(f"mcp-cancellation demo: {exc}", file=sys.stderr)
        return 2
    metrics = isinstance(app, _Router) and app.metrics is not None
    print(_instructions(args.host, args.port, args.json_response, metrics=metrics), flush=True)
    print(f"registry: {registry!r}", flush=True)
    print(f"table: {registry.storage.identity}\n", flush=True)
    # (uvicorn handles SIGINT itself; a KeyboardInterrupt past it ends the demo quietly)
    with contextlib.suppress(KeyboardInterrupt):
        # proxy_headers=False: uvicorn would otherwise rewrite the client address from
        # X-Forwarded-For itself (it trusts 127.0.0.1 by default); --trusted-proxy decides.
        uvicorn.run(
            app,
            host=args.host,
            port=args.port,
            log_level="warning",
            lifespan="on",
            proxy_headers=False,
            # Open tool calls (stubborn_sleep ignores cancellation) must not hold a
            # SIGTERM or Ctrl-C hostage: give them 5 s, then uvicorn cancels them.
            timeout_graceful_shutdown=5,
        )
    return 0
