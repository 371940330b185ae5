"""``mcp-cancellation inspect`` and ``mcp-cancellation cancel``: an operator's view of the
requests in flight across every worker, and the cancellation of a scope's calls.

Both read a live deployment: its Redis table (``--redis URL --prefix P``, every worker and
node at once) or a process's admin app (``--url``, :func:`mcp_cancellation.admin.admin_app`,
for one process on the memory storage). Scopes are shown as the dashboards show them (a
session as its short hash, never its id).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, NoReturn

from .admin import ADMIN_TOKEN_ENV, cancel_requests, list_requests
from .errors import CancellationError

__all__ = ["add_cancel_parser", "add_inspect_parser"]


def _source_options(parser: argparse.ArgumentParser) -> None:
    where = parser.add_argument_group("where the requests are (one of)")
    where.add_argument("--redis", metavar="URL", help="the deployment's Redis (or cluster) URL")
    where.add_argument(
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
        help="list the requests in flight, across every worker",
        description="List the requests in flight across every worker, oldest first.",
    )
    _source_options(inspect)
    inspect.add_argument("--scope", help="only this scope (as the dashboards show it)")
    inspect.add_argument("--kind", help="only this scope kind (session, principal, ip, ...)")
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
    cancel.add_argument("--scope", required=True, help="the scope (as the dashboards show it)")
    which = cancel.add_mutually_exclusive_group(required=True)
    which.add_argument("--id", help="the request id")
    which.add_argument("--all", action="store_true", help="every call of the scope")
    which.add_argument("--tool", help="every call of this tool in the scope")
    cancel.add_argument("--reason", default=None, help="the reason the callers get")
    cancel.set_defaults(run=_run_cancel)


def _run_inspect(args: argparse.Namespace) -> int:
    filters = {"scope": args.scope, "kind": args.kind, "tool": args.tool}
    if args.url:
        query = {k: v for k, v in filters.items() if v is not None}
        if args.min_age is not None:
            query["min_age"] = str(args.min_age)
        suffix = "/requests?" + urllib.parse.urlencode(query)
        rows = _call(args, suffix, None).get("requests", [])
    else:
        rows = _with_registry(
            args, lambda registry: list_requests(registry, min_age=args.min_age, **filters)
        )
    _print(args, rows, "requests")
    return 0


def _run_cancel(args: argparse.Namespace) -> int:
    if args.url:
        order: dict[str, Any] = {"scope": args.scope, "reason": args.reason}
        if args.id is not None:
            order["id"] = args.id
        elif args.tool is not None:
            order["tool"] = args.tool
        else:
            order["all"] = True
        rows = _call(args, "/cancel", order).get("cancelled", [])
    else:
        rows = _with_registry(
            args,
            lambda registry: cancel_requests(
                registry,
                args.scope,
                request_id=args.id,
                tool=args.tool,
                every=args.all,
                reason=args.reason,
            ),
        )
    _print(args, rows, "cancelled")
    return 0


def _fail(message: str) -> NoReturn:
    print(f"mcp-cancellation: error: {message}", file=sys.stderr)
    raise SystemExit(1)


def _call(args: argparse.Namespace, suffix: str, body: dict[str, Any] | None) -> dict[str, Any]:
    """One call of the admin app at ``--url``."""
    token = args.token or os.environ.get(ADMIN_TOKEN_ENV, "")
    data = None if body is None else json.dumps(body).encode("utf-8")
    request = urllib.request.Request(
        args.url.rstrip("/") + suffix,
        data=data,
        method="GET" if body is None else "POST",
        headers={"authorization": f"Bearer {token}", "content-type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            document: dict[str, Any] = json.loads(answer.read())
            return document
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", "replace")
        _fail(f"the admin app at {args.url} answered {exc.code}: {detail}")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        _fail(f"cannot reach the admin app at {args.url}: {exc}")


def _with_registry(args: argparse.Namespace, action: Any) -> list[dict[str, Any]]:
    """Run *action* (a coroutine function of a registry) on the Redis table at ``--redis``."""
    if not args.redis:
        _fail("give --redis URL (the deployment's table) or --url (a process's admin app)")
    from . import CancellationRegistry
    from .storage.redis import DEFAULT_PREFIX, PartitionedRedisStorage, RedisStorage

    async def run() -> list[dict[str, Any]]:
        prefix = args.prefix or DEFAULT_PREFIX
        storage = (
            PartitionedRedisStorage.from_url(
                args.redis, partitions=args.partitions, prefix=prefix, timeout=5.0
            )
            if args.partitions > 1
            else RedisStorage.from_url(args.redis, prefix=prefix, timeout=5.0)
        )
        registry = CancellationRegistry(storage, janitor_interval=None)
        try:
            return [view.as_json() for view in await action(registry)]
        finally:
            await registry.aclose()

    try:
        return asyncio.run(run())
    except CancellationError as exc:
        _fail(f"cannot reach the storage at {args.redis}: {exc}")


def _print(args: argparse.Namespace, rows: list[dict[str, Any]], what: str) -> None:
    if args.json:
        print(json.dumps({what: rows}, indent=1))
        return
    if not rows:
        print("no request in flight" if what == "requests" else "nothing cancelled")
        return
    head = ("AGE", "SCOPE", "ID", "TOOL", "WORKER", "CANCELLED")
    table = [
        (
            f"{row['age']:.1f}s",
            row["scope"],
            row["id"],
            row["tool"] or "-",
            row["worker"],
            ("yes: " + (row["reason"] or "no reason")) if row["cancelled"] else "no",
        )
        for row in rows
    ]
    widths = [max(len(str(r[i])) for r in (head, *table)) for i in range(len(head))]
    for line in (head, *table):
        print("  ".join(str(cell).ljust(width) for cell, width in zip(line, widths, strict=True)))
    if what == "cancelled":
        print(f"cancelled {len(rows)} request(s)")
