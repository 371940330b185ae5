"""``mcp-cancellation inspect`` and ``mcp-cancellation cancel``: an operator's view of the
requests in flight across every worker, and the cancellation of a scope's calls.

Both read a live deployment: its Redis table (``--redis URL --prefix P``, every worker and
node at once) or a process's admin app (``--url``, :func:`mcp_cancellation.admin.admin_app`,
for one process on the memory storage). Scopes are shown as the dashboards show them (a
session as its short hash, never its id).

The Redis path only reads until it cancels: it checks that the named table exists with
the named layout (exit 2 otherwise, saying what the server holds), registers nothing and
leaves the keyspace as it found it. Exit codes: 0 done, 1 the storage or the app could not
answer, 2 a usage error (a wrong prefix, partition count or scope, a missing extra).
Every field a client chose (ids, tools, reasons, scopes) is printed escaped
(:mod:`._printable`); ``--json`` is plain JSON, whose encoder escapes them already.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

from ._errors import CancellationError, ConfigurationError
from ._printable import printable
from ._redaction import redact_url, scrub
from .admin import ADMIN_TOKEN_ENV, RequestView, cancel_document, cancel_requests, list_requests
from .scope import scope_kind

__all__ = ["add_cancel_parser", "add_inspect_parser"]

#: Exit codes.
UNAVAILABLE, USAGE = 1, 2


def _source_options(parser: argparse.ArgumentParser) -> None:
    where = parser.add_argument_group("where the requests are (exactly one)")
    source = where.add_mutually_exclusive_group(required=True)
    source.add_argument("--redis", metavar="URL", help="the deployment's Redis (or cluster) URL")
    source.add_argument(
        "--url", metavar="URL", help="a process's admin app, e.g. http://h:8000/admin"
    )
    parser.add_argument(
        "--prefix", default=None, help="the table's key prefix (default: mcp-cancellation)"
    )
    parser.add_argument(
        "--partitions",
        type=int,
        default=int(os.environ.get("MCP_CANCELLATION_REDIS_PARTITIONS") or 1),
        help="partitions of the Redis table, as the workers use (default: %(default)s)",
    )
    parser.add_argument(
        "--token",
        default=None,
        help=f"the admin app's bearer token (default: ${ADMIN_TOKEN_ENV})",
    )
    parser.add_argument("--json", action="store_true", help="print JSON, for scripts")


def add_inspect_parser(subparsers: Any) -> None:
    inspect = subparsers.add_parser(
        "inspect",
        help="list the requests in flight and the tasks, across every worker",
        description="List the requests in flight and the tasks kept (running or ended) "
        "across every worker, oldest first.",
    )
    _source_options(inspect)
    inspect.add_argument(
        "--scope", help="only this scope, as the dashboards show it (ip:203.0.113.7)"
    )
    inspect.add_argument(
        "--kind",
        help="only rows of this kind: 'request' or 'task' (the KIND column), or of this "
        "scope kind: 'session', 'principal', 'ip', 'global' or 'other'",
    )
    inspect.add_argument("--tool", help="only calls of this tool")
    inspect.add_argument(
        "--min-age", type=float, default=None, metavar="SECONDS", help="only older requests"
    )
    inspect.set_defaults(run=_run_inspect)


def add_cancel_parser(subparsers: Any) -> None:
    cancel = subparsers.add_parser(
        "cancel",
        help="cancel a scope's calls in flight, as the operator",
        description="Cancel a scope's calls in flight, as the operator (the quota does "
        "not apply); prints what it cancelled.",
    )
    _source_options(cancel)
    cancel.add_argument(
        "--scope", required=True, help="the scope, as the dashboards show it (ip:203.0.113.7)"
    )
    which = cancel.add_mutually_exclusive_group(required=True)
    which.add_argument("--id", help="the request id (one that starts with '-': --id=-x)")
    which.add_argument("--all", action="store_true", help="every call of the scope")
    which.add_argument("--tool", help="every call of this tool in the scope")
    cancel.add_argument("--reason", default=None, help="the reason the callers get")
    cancel.set_defaults(run=_run_cancel)


def _run_inspect(args: argparse.Namespace) -> int:
    complete = True
    filters = {"scope": args.scope, "kind": args.kind, "tool": args.tool}
    if args.url:
        query = {k: v for k, v in filters.items() if v is not None}
        if args.min_age is not None:
            query["min_age"] = str(args.min_age)
        suffix = "/requests?" + urllib.parse.urlencode(query)
        rows = _call(args, suffix, None).get("requests", [])
    else:

        async def action(registry: Any) -> list[RequestView]:
            return await list_requests(registry, min_age=args.min_age, **filters)

        views, complete = _with_registry(args, action)
        rows = [view.as_json() for view in views]
    _hint_scope(args, rows)
    _print(args, {"requests": rows})
    return 0 if complete else UNAVAILABLE


def _run_cancel(args: argparse.Namespace) -> int:
    complete = True
    if args.url:
        order: dict[str, Any] = {"scope": args.scope, "reason": args.reason}
        if args.id is not None:
            order["id"] = args.id
        elif args.tool is not None:
            order["tool"] = args.tool
        else:
            order["all"] = True
        document = _call(args, "/cancel", order)
    else:

        async def action(registry: Any) -> list[RequestView]:
            return await cancel_requests(
                registry,
                args.scope,
                request_id=args.id,
                tool=args.tool,
                every=args.all,
                reason=args.reason,
            )

        views, complete = _with_registry(args, action)
        document = cancel_document(views)
    document.setdefault("cancelled", [])
    document.setdefault("worker_gone", [])
    _hint_scope(args, document["cancelled"] + document["worker_gone"])
    _print(args, document)
    return 0 if complete else UNAVAILABLE


def _fail(message: str, code: int = UNAVAILABLE) -> NoReturn:
    print(f"mcp-cancellation: error: {message}", file=sys.stderr)
    raise SystemExit(code)


def _hint_scope(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    """A scope written without its kind (``127.0.0.1`` for ``ip:127.0.0.1``) that matched
    nothing is a usage error, with the hint."""
    scope = args.scope
    if rows or not scope or scope_kind(scope) != "other":
        return
    _fail(
        f"nothing in flight in scope {printable(scope)!r}: a scope is written with its "
        f"kind, as the dashboards show it: 'ip:{printable(scope)}', 'principal:NAME', "
        "'session:HASH' or 'global'",
        USAGE,
    )


def _call(args: argparse.Namespace, suffix: str, body: dict[str, Any] | None) -> dict[str, Any]:
    """One call of the admin app at ``--url``."""
    token = args.token or os.environ.get(ADMIN_TOKEN_ENV, "")
    data = None if body is None else json.dumps(body).encode("utf-8")
    where = redact_url(args.url)
    try:
        request = urllib.request.Request(
            args.url.rstrip("/") + suffix,
            data=data,
            method="GET" if body is None else "POST",
            headers={"authorization": f"Bearer {token}", "content-type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            document: dict[str, Any] = json.loads(answer.read())
            return document
    except urllib.error.HTTPError as exc:
        detail = scrub(exc.read().decode("utf-8", "replace"), [args.url, token])
        if exc.code == 401:
            _fail(
                f"the admin app at {where} refused the token (401): pass the token it was "
                f"built with (admin_app(token=...)) as --token TOKEN or ${ADMIN_TOKEN_ENV}"
            )
        _fail(f"the admin app at {where} answered {exc.code}: {printable(detail)}")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        _fail(f"cannot reach the admin app at {where}: {scrub(exc, [args.url, token])}")


def _with_registry(
    args: argparse.Namespace, action: Callable[[Any], Awaitable[list[RequestView]]]
) -> tuple[list[RequestView], bool]:
    """Run *action* (a coroutine function of a registry) on the Redis table at ``--redis``,
    once the table is found as named; its result, and whether every partition could be
    read (each one that could not is named on stderr)."""
    try:
        from . import CancellationRegistry
        from .storage.redis import PartitionedRedisStorage, RedisStorage
        from .storage.redis._storage import DEFAULT_PREFIX
    except ImportError as exc:  # the redis extra is missing: one line, as `demo` says it
        _fail(str(exc), USAGE)
    if args.partitions < 1:
        _fail("--partitions must be at least 1", USAGE)
    # The storage logs a failed call once (for servers); here the error line says it.
    logging.getLogger("mcp_cancellation.storage").setLevel(logging.ERROR)

    async def run() -> list[RequestView]:
        prefix = args.prefix or DEFAULT_PREFIX
        storage = (
            PartitionedRedisStorage.from_url(
                args.redis, partitions=args.partitions, prefix=prefix, timeout=5.0, operator=True
            )
            if args.partitions > 1
            else RedisStorage.from_url(args.redis, prefix=prefix, timeout=5.0, operator=True)
        )
        registry = CancellationRegistry(storage, janitor_interval=None)
        try:
            await storage.check_table()
            done = await action(registry)
            for index, part, error in getattr(storage, "unreadable", ()):
                # What it read is printed; what it could not is named, and the exit is 1.
                print(
                    f"mcp-cancellation: warning: partition {index} (prefix {part!r}) could "
                    f"not be read, its calls are not listed: {scrub(error, [args.redis])}",
                    file=sys.stderr,
                )
                partial.append(index)
            return done
        finally:
            await registry.aclose()

    where = redact_url(args.redis)
    partial: list[int] = []
    try:
        return asyncio.run(run()), not partial
    except ConfigurationError as exc:
        _fail(scrub(exc, [args.redis]), USAGE)
    except CancellationError as exc:
        _fail(f"cannot reach the storage at {where}: {scrub(exc, [args.redis])}")


def _print(args: argparse.Namespace, document: dict[str, list[dict[str, Any]]]) -> None:
    """Print *document*; a reader that stops reading (``inspect | head``) ends the
    output quietly, as any Unix tool's does."""
    try:
        _write(args, document)
        sys.stdout.flush()
    except BrokenPipeError:
        # The rest goes nowhere, and Python's own flush at exit must not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _write(args: argparse.Namespace, document: dict[str, list[dict[str, Any]]]) -> None:
    if args.json:
        print(json.dumps(document, indent=1))
        return
    if "requests" in document:
        _table(document["requests"]) if document["requests"] else print("no request in flight")
        return
    cancelled, gone = document["cancelled"], document["worker_gone"]
    if cancelled:
        _table(cancelled)
    print(f"cancelled {len(cancelled)} request(s)" if cancelled else "nothing cancelled")
    if gone:
        print(f"not cancelled: {len(gone)} request(s) of a worker that is gone")
        _table(gone)


def _table(rows: list[dict[str, Any]]) -> None:
    head = ("AGE", "KIND", "SCOPE", "ID", "TOOL", "WORKER", "STATUS", "CANCELLED")
    table = [
        (
            f"{row['age']:.1f}s",
            printable(row.get("kind", "request")),
            printable(row["scope"]),
            printable(row["id"]),
            printable(row["tool"] or "-"),
            printable(row["worker"]) + (" (gone)" if row.get("worker_alive") is False else ""),
            printable(row.get("status") or "-"),
            ("yes: " + printable(row["reason"] or "no reason")) if row["cancelled"] else "no",
        )
        for row in rows
    ]
    widths = [max(len(r[i]) for r in (head, *table)) for i in range(len(head))]
    for line in (head, *table):
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)))
