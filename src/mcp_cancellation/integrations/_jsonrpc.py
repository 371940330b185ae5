"""JSON-RPC plumbing for the ASGI middleware (private).

Classifies a POST body without validating it the way the SDK does (that stays the SDK's
job), and writes the few JSON-RPC answers the middleware gives itself.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Final, Literal

from .._asgi import Send, send_response
from .._token import TOOL_ERROR

try:
    # The SDK's own parser (its transport reads a POST with ``pydantic_core.from_json``):
    # the middleware then sees exactly the message the SDK will, and it is the faster of
    # the two. The middleware itself does not need the SDK, hence the fallback.
    from pydantic_core import from_json as _parse_json
except ImportError:  # pragma: no cover - pydantic comes with every MCP SDK
    from json import loads as _parse_json  # type: ignore[assignment]

__all__ = [
    "CANCELLED_METHOD",
    "INITIALIZE_METHOD",
    "UNTRACKED_METHODS",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "QUOTA_ERROR",
    "OTHER",
    "Kind",
    "Message",
    "accepts",
    "answer_error",
    "classify",
    "is_handshake_version",
    "is_json_content_type",
    "not_acceptable",
    "send_accepted",
    "send_error",
    "send_retry_later",
]


CANCELLED_METHOD: Final = "notifications/cancelled"
INVALID_REQUEST: Final = -32600
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
#: Server-defined error: the caller's scope holds ``max_rows_per_scope`` cancellations.
QUOTA_ERROR: Final = -32000


def _handshake_versions() -> frozenset[str]:
    """The SDK's own list, so that a new handshake revision is picked up with it."""
    try:
        from mcp_types import version
    except ImportError:  # pragma: no cover - the middleware itself does not need the SDK
        return frozenset(("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"))
    return frozenset(version.HANDSHAKE_PROTOCOL_VERSIONS)


HANDSHAKE_PROTOCOL_VERSIONS: Final[frozenset[str]] = _handshake_versions()


Kind = Literal["request", "cancel", "other"]
#: What the middleware needs to know about one POST body: ``(kind, request_id, params,
#: method)``. ``kind`` is ``"request"`` (a method call with a non-null id, other than
#: ``initialize``), ``"cancel"`` (a ``notifications/cancelled``, with no id or a null one,
#: which the SDK validates as a notification), or ``"other"`` (anything else: passed
#: through untouched, including everything the SDK will reject). A plain tuple: one is
#: made per POST.
Message = tuple[Kind, object, object, "str | None"]

#: Everything the middleware passes through untouched.
OTHER: Final[Message] = ("other", None, None, None)
#: ``initialize`` is passed through too (counted, never tracked); the middleware reads the
#: session id of its answer.
INITIALIZE_METHOD: Final = "initialize"

#: The method whose ``params.name`` is the tool a request calls.
TOOLS_CALL_METHOD = "tools/call"
#: Requests the middleware does not track (their ids are never worth cancelling): the
#: tasks extension's, answered at once from the task table, and ``subscriptions/listen``,
#: a stream its client ends by closing it (a listener costs the table nothing). They are
#: still counted.
UNTRACKED_METHODS = frozenset({"tasks/get", "tasks/update", "tasks/cancel", "subscriptions/listen"})


def classify(body: bytes) -> Message:
    """Classify a POST body; never raises."""
    if not body or body.lstrip()[:1] != b"{":  # not an object: a batch, garbage, empty
        return OTHER
    try:
        decoded = _parse_json(body)
    except (ValueError, RecursionError):  # bad JSON, invalid UTF-8, deep nesting
        return OTHER
    if not isinstance(decoded, dict):
        return OTHER
    method = decoded.get("method")
    if not isinstance(method, str) or decoded.get("jsonrpc") != "2.0":
        # A response, or an envelope the SDK refuses (it validates ``"jsonrpc": "2.0"``):
        # the SDK answers it, and the middleware acts on nothing the SDK would not accept.
        return OTHER
    if decoded.get("id") is not None:  # an ``"id": null`` message is the SDK's notification
        if method == INITIALIZE_METHOD:  # (its params: the protocol version it asks for)
            return ("other", None, decoded.get("params"), INITIALIZE_METHOD)
        params = decoded.get("params") if method == TOOLS_CALL_METHOD else None
        return ("request", decoded["id"], params, method)
    if method == CANCELLED_METHOD:
        return ("cancel", None, decoded.get("params"), method)
    return OTHER


def is_handshake_version(version: str | None) -> bool:
    """Whether a ``MCP-Protocol-Version`` header selects the handshake-era transport
    (absent means the spec's default, a handshake version)."""
    return version is None or version in HANDSHAKE_PROTOCOL_VERSIONS


def accepts(value: str | None, *, event_stream: bool) -> bool:
    """Whether an ``Accept`` header passes the SDK's check of a POST: it admits
    ``application/json`` and, with *event_stream* (an SSE-mode server), also
    ``text/event-stream`` (``*/*``, ``application/*`` and ``text/*`` count)."""
    media = {part.split(";", 1)[0].strip().lower() for part in (value or "").split(",")}
    if "*/*" in media:
        return True
    if "application/json" not in media and "application/*" not in media:
        return False
    return not event_stream or "text/event-stream" in media or "text/*" in media


def not_acceptable(event_stream: bool) -> str:
    """The SDK's words for a POST that :func:`accepts` refuses."""
    if event_stream:
        return "Not Acceptable: Client must accept both application/json and text/event-stream"
    return "Not Acceptable: Client must accept application/json"


def is_json_content_type(value: str | None) -> bool:
    """Whether a ``Content-Type`` passes the SDK's two checks of a POST (the transport
    security check, then the transport's own). Anything else the SDK refuses: so must the
    middleware, or a cross-site ``text/plain`` form or ``no-cors`` fetch, which browsers
    send without a CORS preflight, could cancel the user's requests."""
    if value is None or not value.lower().startswith("application/json"):
        return False
    return any(part.strip() == "application/json" for part in value.split(";")[0].split(","))


async def send_error(
    send: Send,
    status: int,
    code: int,
    message: str,
    *,
    request_id: object = None,
    extra_headers: Iterable[tuple[bytes, bytes]] = (),
) -> None:
    """Answer with a JSON-RPC error object (``id: null`` unless given)."""
    body = json.dumps(
        {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}},
        separators=(",", ":"),
    ).encode()
    await send_response(send, status, body, content_type=b"application/json", headers=extra_headers)


async def send_retry_later(send: Send, status: int, code: int, message: str) -> None:
    """A JSON-RPC error that a client may retry in a second (``Retry-After: 1``)."""
    await send_error(send, status, code, message, extra_headers=[(b"retry-after", b"1")])


async def send_accepted(send: Send) -> None:
    """Answer ``202 Accepted`` with an empty body, as the SDK does for notifications."""
    await send_response(send, 202, content_type=b"application/json")


_DECODER = json.JSONDecoder()
_SPACE = " \t\r\n"
#: How a result whose own ``isError`` is true ends (the SDK and FastMCP serialise
#: ``CallToolResult`` with ``isError`` last): the result's brace, then the message's. A
#: tool's output that echoes ``{"isError": true}`` ends with one brace more.
_TOOL_ERROR_END = re.compile(rb'"isError"\s*:\s*true\s*\}\s*\}\s*\Z')


def answer_error(body: bytes) -> str | None:
    """How an answer's body failed, from the JSON-RPC envelope only: the ``code`` of a
    response's own ``error`` (``"-32602"``), ``tool_error`` for a tool result whose own
    ``isError`` is true, else ``None``. *body* is a JSON response or a chunk of an SSE
    stream (each ``data:`` line a message); nothing inside a result (a tool's output that
    mentions ``"error"`` or ``"isError"``) counts, and notifications are skipped."""
    if body[:1] == b"{" or body.lstrip()[:1] == b"{":
        return _message_error(body.strip())
    for line in body.splitlines():
        if line.startswith(b"data:"):
            found = _message_error(line[5:].strip())
            if found is not None:
                return found
    return None


#: The head of a message the envelope is read from (its id and error object fit; a
#: longer error is read from the whole message).
_HEAD = 4096


def _message_error(message: bytes) -> str | None:
    """The error of one JSON-RPC response (see :func:`answer_error`)."""
    try:
        return _envelope_error(message, message[:_HEAD].decode("utf-8", "ignore"))
    except ValueError:
        if len(message) <= _HEAD:
            return None
    try:
        return _envelope_error(message, message.decode("utf-8"))
    except ValueError:  # (UnicodeDecodeError too)
        return None


def _envelope_error(message: bytes, text: str) -> str | None:
    """The envelope's keys read in order from *text* (the head of *message*, or all of
    it), each value skipped whole, until ``error`` or ``result``."""
    at = _skip(text, 0)
    if text[at : at + 1] != "{":
        return None
    at += 1
    while True:
        at = _skip(text, at)
        key, at = _DECODER.raw_decode(text, at)
        at = _skip(text, at)
        if text[at : at + 1] != ":":
            return None
        at = _skip(text, at + 1)
        if key == "error":
            error, _ = _DECODER.raw_decode(text, at)
            code = error.get("code") if isinstance(error, dict) else None
            return str(code) if isinstance(code, int) and not isinstance(code, bool) else None
        if key == "result":
            tail = max(0, len(message) - 64)
            return TOOL_ERROR if _TOOL_ERROR_END.search(message, tail) else None
        if key == "method":
            return None  # a request or notification, not an answer
        _, at = _DECODER.raw_decode(text, at)
        at = _skip(text, at)
        if text[at : at + 1] != ",":
            return None
        at += 1


def _skip(text: str, at: int) -> int:
    while at < len(text) and text[at] in _SPACE:
        at += 1
    return at
