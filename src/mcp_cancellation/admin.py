"""Operators: see every request in flight, and cancel a scope's calls.

What an alert or a dashboard names (a scope, a tool), an operator acts on here, as with
``pg_stat_activity`` and ``pg_cancel_backend``: :func:`list_requests` lists the requests
in flight in every worker that shares the registry's table, :func:`cancel_requests`
cancels those of one scope (by id, by tool, or all), as the operator (the quota does not
apply; ``request.cancelled`` carries ``method="operator"``, sent by the worker whose call
it stops). Scopes are shown and named as the dashboards show them: a session as its short
hash, never its id (see :class:`~mcp_cancellation.scope.ScopeLabeler`); only that label
selects, so no caller can choose a raw scope that an operator's selection also hits.

:func:`admin_app` serves both as JSON behind a bearer token, to mount beside ``/metrics``
(never on the MCP path); the ``mcp-cancellation inspect`` and ``cancel`` commands call it
(``--url``) or read the Redis table directly (``--redis``).
"""

from __future__ import annotations

import dataclasses
import hmac
import json
import logging
import os
import time
import urllib.parse
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from ._asgi import Receive, Scope, Send, header, send_response, served_unless_http
from ._errors import CancellationError, ConfigurationError, StorageUnavailable
from ._printable import printable
from .scope import ScopeLabeler, scope_kind

if TYPE_CHECKING:
    from ._registry import CancellationRegistry
    from .storage._base import InFlightRequest
    from .storage._task_table import TaskRecord

__all__ = [
    "AdminApp",
    "RequestView",
    "admin_app",
    "cancel_document",
    "cancel_requests",
    "list_requests",
]

logger = logging.getLogger("mcp_cancellation.admin")

#: Environment variable holding the admin app's bearer token when none is given.
ADMIN_TOKEN_ENV = "MCP_CANCELLATION_ADMIN_TOKEN"
_BODY_LIMIT = 64 * 1024


@dataclass(frozen=True, slots=True)
class RequestView:
    """One request in flight as an operator sees it (never a raw session id)."""

    scope: str
    scope_kind: str
    id: str
    tool: str | None
    age: float
    worker: str
    cancelled: bool
    reason: str | None
    #: Whether the worker running it is alive: a dead worker's call cannot be stopped
    #: (its row goes with the next cleanup); ``None`` for an ended task (no worker runs
    #: it any more).
    worker_alive: bool | None = True
    #: ``request``, or ``task`` (SEP-2663: ``id`` is its task id).
    kind: str = "request"
    #: A task's status (``working``, ``input_required``, ``completed``, ...); ``None``
    #: for a request.
    status: str | None = None

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _views(
    requests: Iterable[InFlightRequest], labeler: ScopeLabeler
) -> list[tuple[RequestView, InFlightRequest]]:
    now = time.time()
    found = [
        (
            RequestView(
                scope=labeler(r.scope),
                scope_kind=scope_kind(r.scope),
                id=r.request_id,
                tool=r.tool,
                age=round(max(0.0, now - r.started), 3),
                worker=r.worker,
                cancelled=r.cancelled,
                reason=r.reason,
                worker_alive=r.alive,
            ),
            r,
        )
        for r in requests
    ]
    found.sort(key=lambda pair: -pair[0].age)
    return found


def _selected(
    pairs: list[tuple[RequestView, Any]],
    *,
    scope: str | None,
    kind: str | None,
    tool: str | None,
    min_age: float | None,
    request_id: str | None = None,
) -> list[tuple[RequestView, Any]]:
    return [
        (view, request)
        for view, request in pairs
        if (scope is None or view.scope == scope)
        and (kind is None or view.scope_kind == kind)
        and (tool is None or view.tool == tool)
        and (min_age is None or view.age >= min_age)
        and (request_id is None or view.id == request_id)
    ]


#: A row's kinds (``RequestView.kind``, the listing's KIND column).
ROW_KINDS = ("request", "task")


async def list_requests(
    registry: CancellationRegistry,
    *,
    scope: str | None = None,
    kind: str | None = None,
    tool: str | None = None,
    min_age: float | None = None,
    hash_key: str | bytes | None = None,
) -> list[RequestView]:
    """The requests in flight and the tasks kept (SEP-2663: ``kind`` ``task``, running
    or ended), oldest first, filtered by scope (as the dashboards show it), *kind*, tool
    and minimum age (seconds). *kind* is a row's kind, ``request`` or ``task`` (the
    listing's KIND column), or a scope kind (``session``, ``principal``, ``ip``,
    ``global``, ``other``): the two sets of names never meet."""
    labeler = ScopeLabeler(hash_key)
    row_kind = kind if kind in ROW_KINDS else None
    if row_kind is not None:
        kind = None
    tasks = await _tasks(registry)
    pairs = _views(await registry.requests(), labeler)
    views = []
    for view, request in _selected(pairs, scope=scope, kind=kind, tool=tool, min_age=min_age):
        record = tasks.pop((request.scope, request.request_id), None)
        if record is not None:
            view = dataclasses.replace(view, kind="task", status=record.status)
        views.append(view)
    now_ms = time.time() * 1000
    for record in tasks.values():  # ended, or of a worker that is gone
        view = RequestView(
            scope=labeler(record.scope),
            scope_kind=scope_kind(record.scope),
            id=record.task_id,
            tool=record.tool,
            age=round(max(0.0, (now_ms - record.created_ms) / 1000), 3),
            worker=record.worker,
            cancelled=record.status == "cancelled",
            reason=record.message if record.status == "cancelled" else None,
            # Active, yet not in flight: its worker is gone (the reaper ends it soon).
            worker_alive=False if record.status in ("working", "input_required") else None,
            kind="task",
            status=record.status,
        )
        if _selected([(view, None)], scope=scope, kind=kind, tool=tool, min_age=min_age):
            views.append(view)
    if row_kind is not None:
        views = [view for view in views if view.kind == row_kind]
    views.sort(key=lambda v: -v.age)
    return views


def _as_task(view: RequestView, record: TaskRecord | None) -> RequestView:
    """*view*, labelled a task when *record* is its task."""
    if record is None:
        return view
    return dataclasses.replace(view, kind="task", status=record.status)


async def _tasks(registry: CancellationRegistry) -> dict[tuple[str, str], TaskRecord]:
    """The tasks the registry's storage keeps, by (scope, task id); none when it keeps
    no tasks or cannot list them."""
    try:
        records = await registry.storage.task_table.tasks()
    except (NotImplementedError, StorageUnavailable):
        return {}
    return {(r.scope, r.task_id): r for r in records}


async def cancel_requests(
    registry: CancellationRegistry,
    scope: str,
    *,
    request_id: str | None = None,
    tool: str | None = None,
    every: bool = False,
    reason: str | None = None,
    hash_key: str | bytes | None = None,
) -> list[RequestView]:
    """Cancel, as the operator, the requests in flight of *scope* (as the dashboards show
    it): the one with *request_id*, those calling *tool*, or *every* one. Exactly one of
    *request_id*, *tool* and *every* must be given. Returns those cancelled (each logged,
    ``cancelled`` true) and those of a dead worker, which cannot be stopped
    (``worker_alive`` false, left as they were)."""
    if sum((request_id is not None, tool is not None, every)) != 1:
        raise ConfigurationError("give exactly one of an id, a tool, or all")
    if not scope:
        raise ConfigurationError("a scope is required")
    pairs = _views(await registry.requests(), ScopeLabeler(hash_key))
    chosen = _selected(
        pairs, scope=scope, kind=None, tool=tool, min_age=None, request_id=request_id
    )
    tasks = await _tasks(registry) if chosen else {}
    chosen = [
        (_as_task(view, tasks.get((request.scope, request.request_id))), request)
        for view, request in chosen
    ]
    done: list[RequestView] = []
    seen: set[tuple[str, str]] = set()
    for view, request in chosen:
        if not view.worker_alive:
            logger.info(
                "not cancelled: request %s in scope %s runs on worker %s, which is gone",
                printable(view.id),
                printable(view.scope),
                printable(view.worker),
            )
            done.append(view)
            continue
        if (request.scope, request.request_id) in seen:
            continue  # one cancellation reaches every owner of the request
        seen.add((request.scope, request.request_id))
        if await registry.cancel_as_operator(request.request_id, reason, request.scope):
            logger.info(
                "operator cancelled request %s in scope %s (tool %s, worker %s): %s",
                printable(view.id),
                printable(view.scope),
                printable(view.tool or "-"),
                printable(view.worker),
                printable(reason or "no reason given"),
            )
            done.append(dataclasses.replace(view, cancelled=True, reason=view.reason or reason))
    return done


class AdminApp:
    """The ASGI app :func:`admin_app` returns: ``GET <mount>/requests`` and
    ``POST <mount>/cancel``, each behind ``Authorization: Bearer <token>``."""

    def __init__(
        self, registry: CancellationRegistry, token: str, hash_key: str | bytes | None = None
    ) -> None:
        if not isinstance(token, str) or not token.strip():
            raise ConfigurationError(f"an admin app needs a token (token= or ${ADMIN_TOKEN_ENV})")
        self.registry = registry
        self._token = token.strip().encode("utf-8")
        self._hash_key = hash_key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if await served_unless_http(scope, receive, send):
            return
        if not self._authorized(scope):
            error = "a valid bearer token is required: Authorization: Bearer <token>"
            await _json(send, 401, {"error": error}, bearer=True)
            return
        path = str(scope.get("path", "")).removeprefix(str(scope.get("root_path", "")))
        method = scope.get("method")
        try:
            if path.rstrip("/").endswith("/requests") and method == "GET":
                await self._list(scope, send)
            elif path.rstrip("/").endswith("/cancel") and method == "POST":
                await self._cancel(receive, send)
            else:
                await _json(send, 404, {"error": "GET requests or POST cancel"})
        except StorageUnavailable as exc:
            await _json(send, 503, {"error": f"storage unavailable: {exc}"})
        except (CancellationError, ValueError) as exc:
            await _json(send, 400, {"error": str(exc)})

    def _authorized(self, scope: Scope) -> bool:
        given = header(scope, b"authorization") or ""
        kind, _, token = given.partition(" ")
        return kind.lower() == "bearer" and hmac.compare_digest(
            token.strip().encode("utf-8"), self._token
        )

    async def _list(self, scope: Scope, send: Send) -> None:
        query = urllib.parse.parse_qs(bytes(scope.get("query_string", b"")).decode("latin-1"))

        def one(name: str) -> str | None:
            values = query.get(name)
            return values[-1] if values else None

        min_age = one("min_age")
        views = await list_requests(
            self.registry,
            scope=one("scope"),
            kind=one("kind"),
            tool=one("tool"),
            min_age=None if min_age is None else float(min_age),
            hash_key=self._hash_key,
        )
        await _json(send, 200, {"requests": [v.as_json() for v in views]})

    async def _cancel(self, receive: Receive, send: Send) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if len(body) > _BODY_LIMIT:
                await _json(send, 413, {"error": "body too large"})
                return
            if not message.get("more_body", False):
                break
        try:
            order = json.loads(body)
        except ValueError:
            order = None
        if not isinstance(order, dict) or not isinstance(order.get("scope"), str):
            raise ValueError('expected a JSON object with "scope" and "id", "tool" or "all"')
        request_id = order.get("id")
        views = await cancel_requests(
            self.registry,
            order["scope"],
            request_id=None if request_id is None else str(request_id),
            tool=order.get("tool"),
            every=order.get("all") is True,
            reason=order.get("reason"),
            hash_key=self._hash_key,
        )
        await _json(send, 200, cancel_document(views))


def cancel_document(views: Iterable[RequestView]) -> dict[str, list[dict[str, Any]]]:
    """:func:`cancel_requests`' answer as the admin app and ``cancel --json`` give it: the
    requests ``cancelled``, and those whose worker is gone (``worker_gone``)."""
    views = list(views)
    return {
        "cancelled": [v.as_json() for v in views if v.worker_alive],
        "worker_gone": [v.as_json() for v in views if not v.worker_alive],
    }


async def _json(send: Send, status: int, document: Any, *, bearer: bool = False) -> None:
    headers = [(b"www-authenticate", b"Bearer")] if bearer else []
    body = json.dumps(document).encode("utf-8")
    await send_response(send, status, body, content_type=b"application/json", headers=headers)


def admin_app(
    registry: CancellationRegistry,
    *,
    token: str | None = None,
    hash_key: str | bytes | None = None,
) -> AdminApp:
    """An ASGI app serving the operators' two operations as JSON: ``GET /requests``
    (query parameters ``scope``, ``kind``, ``tool``, ``min_age``) and ``POST /cancel``
    (a JSON object: ``scope``, and ``id``, ``tool`` or ``"all": true``, with an optional
    ``reason``). Every request needs ``Authorization: Bearer <token>`` (*token*, else
    ``$MCP_CANCELLATION_ADMIN_TOKEN``; compared in constant time); anything else is
    answered 401. Mount it beside ``/metrics``, never on the MCP path. *hash_key* is the
    bridges' key for session labels (the same on every worker)."""
    token = token if token is not None else os.environ.get(ADMIN_TOKEN_ENV, "")
    return AdminApp(registry, token, hash_key)
