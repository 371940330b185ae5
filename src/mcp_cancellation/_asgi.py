"""ASGI plumbing shared by everything that speaks ASGI here: the middleware, the demo's
router and the ``/metrics`` app (private).

It sits at the bottom of the package, next to ``_ids`` and ``_config``, so that the
telemetry layer's ``/metrics`` app uses it without importing the integrations layer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

__all__ = [
    "ASGIApp",
    "TooLarge",
    "read_body",
    "Message",
    "Receive",
    "Scope",
    "Send",
    "header",
    "route_path",
    "send_response",
    "serve_lifespan",
    "served_unless_http",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def header(scope: Scope, name: bytes) -> str | None:
    """The first value of header *name* (lower-case bytes), or ``None``."""
    for key, value in scope.get("headers") or ():
        if key == name:
            text: str = value.decode("latin-1")
            return text
    return None


async def send_response(
    send: Send,
    status: int,
    body: bytes = b"",
    *,
    content_type: bytes | None = None,
    headers: Iterable[tuple[bytes, bytes]] = (),
    send_body: bool = True,
) -> None:
    """A whole response: start (with its content length) and one body message.
    *send_body* false answers a ``HEAD``: the headers of the body, without it."""
    start: list[tuple[bytes, bytes]] = []
    if content_type is not None:
        start.append((b"content-type", content_type))
    start.append((b"content-length", str(len(body)).encode("ascii")))
    start.extend(headers)
    await send({"type": "http.response.start", "status": status, "headers": start})
    await send(
        {"type": "http.response.body", "body": body if send_body else b"", "more_body": False}
    )


async def served_unless_http(scope: Scope, receive: Receive, send: Send) -> bool:
    """For an app that only answers HTTP and has nothing to start or stop: serve a
    lifespan scope (see :func:`serve_lifespan`), ignore any other that is not HTTP, and
    say whether the scope was handled here (``False``: an HTTP request for the app)."""
    kind: str = scope["type"]
    if kind == "lifespan":
        await serve_lifespan(receive, send)
    return kind != "http"


async def serve_lifespan(receive: Receive, send: Send) -> None:
    """Answer an ASGI lifespan for an app with nothing to start or stop: startup and
    shutdown complete at once; returns after shutdown."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def route_path(scope: Scope) -> str | None:
    """The path without ``root_path``, as Starlette routes it (``uvicorn --root-path``,
    or an app mounted under a prefix, put the root path in front of ``path``)."""
    path = scope.get("path")
    root = scope.get("root_path")
    if not root or not isinstance(path, str) or not isinstance(root, str):
        return None
    if path.startswith(root) and path[len(root) : len(root) + 1] == "/":
        return path[len(root) :]
    return None


class TooLarge(Exception):
    """A request body over the limit (declared, or as read)."""


async def read_body(scope: Scope, receive: Receive, limit: int) -> tuple[bytes, Message | None]:
    """The whole body of an HTTP request, and the message that cut it short if the client
    left before it ended (else ``None``); :class:`TooLarge` past *limit* bytes. The common
    case, a body in one message, is one read and no copy."""
    message = await receive()
    if message["type"] == "http.request" and not message.get("more_body", False):
        body: bytes = message.get("body", b"")
        if len(body) > limit:
            raise TooLarge
        return body, None
    declared = header(scope, b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise TooLarge
    chunks: list[bytes] = []
    size = 0
    trailing: Message | None = None
    while True:
        if message["type"] != "http.request":
            trailing = message  # the client left before the body ended
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise TooLarge
        if chunk:
            chunks.append(chunk)
        if not message.get("more_body", False):
            break
        message = await receive()
    return (chunks[0] if len(chunks) == 1 else b"".join(chunks)), trailing
