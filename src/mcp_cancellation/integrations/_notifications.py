"""``notifications/cancelled``: the middleware's answer to a client's cancellation.

The SDK's own checks come first (Content-Type, Host/Origin, Accept, params), so that the
middleware never acts on a notification the SDK would refuse; then the cancellation is
recorded in the caller's own scope, by the middleware (a stateless server) or once the
SDK app accepted the notification (a stateful or authenticated one).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from .._asgi import ASGIApp, Message, Receive, Scope, Send, header
from .._errors import CancellationLimitReached, InvalidRequestId, StorageUnavailable
from .._ids import normalize_id
from . import _jsonrpc
from ._exchange import replay
from ._sessions import SESSION_HEADER
from ._transport import Transport

if TYPE_CHECKING:
    from mcp.server.transport_security import TransportSecurityMiddleware

    from .._registry import CancellationRegistry

__all__ = ["Front", "answer_cancelled"]

logger = logging.getLogger("mcp_cancellation.asgi")

_QUOTA_MESSAGE = "Too many outstanding cancellations; try again shortly."
_STORAGE_MESSAGE = "Cancellation storage unavailable; try again shortly."


class Front(NamedTuple):
    """What answering a notification needs of the middleware in front of the app."""

    app: ASGIApp
    registry: CancellationRegistry
    #: The caller's scope of an ASGI request, as the middleware computes it.
    caller_scope: Callable[[Scope], str]
    #: The SDK transport behind the middleware, if found.
    transport: Transport | None
    #: The SDK's Host/Origin check, the middleware's own or the SDK app's.
    security: TransportSecurityMiddleware | None


async def answer_cancelled(
    middleware: Front,
    scope: Scope,
    receive: Receive,
    send: Send,
    body: bytes,
    params: object,
) -> None:
    """Answer a ``notifications/cancelled`` POST: the SDK's own checks first, then the
    cancellation recorded in the caller's scope, by the middleware or once the SDK
    accepted the notification."""
    transport = middleware.transport
    if not _jsonrpc.is_json_content_type(header(scope, b"content-type")):
        # Refused like the SDK refuses it, first (400): a cross-site text/plain POST
        # must not cancel anything.
        await _jsonrpc.send_error(
            send, 400, _jsonrpc.INVALID_REQUEST, "Invalid Content-Type header"
        )
        return
    if middleware.security is not None:
        # The SDK's Host/Origin allow-list (DNS-rebinding protection) guards its own
        # endpoint; the middleware answers this notification in front of it, so it
        # must apply the same check or a rebinding page could cancel the user's calls.
        # Without ``transport_security``, the SDK app's own settings.
        from starlette.requests import Request

        refusal = await middleware.security.validate_request(Request(scope), is_post=True)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
    event_stream = transport is not None and not transport.manager.json_response
    if not _jsonrpc.accepts(header(scope, b"accept"), event_stream=event_stream):
        # The SDK's next check of a POST (406): application/json, and in SSE mode
        # text/event-stream too.
        await _jsonrpc.send_error(
            send, 406, _jsonrpc.INVALID_REQUEST, _jsonrpc.not_acceptable(event_stream)
        )
        return
    if not isinstance(params, dict):
        await _jsonrpc.send_error(
            send, 400, _jsonrpc.INVALID_PARAMS, "Invalid params: params must be an object"
        )
        return
    request_id = params.get("requestId")
    if request_id is None:
        await _jsonrpc.send_error(
            send, 400, _jsonrpc.INVALID_PARAMS, "Invalid params: requestId is required"
        )
        return
    # The caller as the middleware sees it now, as when it tracked the caller's calls
    # (the app's own middleware may add to the ASGI scope later).
    caller = middleware.caller_scope(scope)
    if transport is not None and (
        not transport.manager.stateless or (transport.guarded and not _authenticated(scope))
    ):
        # The SDK answers first, and only its 202 records the cancellation: a stateful
        # server validates the session (and runs its own per-session cancellation),
        # and an endpoint behind authentication refuses a caller the middleware does
        # not see authenticated. An id no row can have is refused first, as always:
        # by the registry, which reports it as on the other path.
        try:
            normalize_id(request_id)
        except InvalidRequestId:
            error_answer = await _record(middleware, caller, request_id, params)
            if error_answer is not None:
                await error_answer(send)
                return
        await _cancel_once_accepted(
            middleware,
            scope,
            receive,
            send,
            body,
            caller,
            request_id,
            params,
            transport.manager.stateless,
        )
        return
    error_answer = await _record(middleware, caller, request_id, params)
    if error_answer is not None:
        await error_answer(send)
        return
    if header(scope, SESSION_HEADER) is not None:
        # An app not known to be the SDK's, with sessions: let it see the notification
        # too, so that its own per-session cancellation still runs.
        await middleware.app(scope, replay(body, None, receive), send)
        return
    await _jsonrpc.send_accepted(send)


async def _record(
    middleware: Front, caller: str, request_id: object, params: dict[Any, Any]
) -> Callable[[Send], Awaitable[None]] | None:
    """Record a notification's cancellation in the *caller*'s scope; the error answer
    to give instead of 202, if any."""
    try:
        await middleware.registry.cancel_in_flight(
            request_id, params.get("reason"), caller, method=_jsonrpc.CANCELLED_METHOD
        )
    except InvalidRequestId as exc:
        message = f"Invalid params: {exc}"
        return lambda send: _jsonrpc.send_error(send, 400, _jsonrpc.INVALID_PARAMS, message)
    except CancellationLimitReached:
        return lambda send: _jsonrpc.send_retry_later(
            send, 429, _jsonrpc.QUOTA_ERROR, _QUOTA_MESSAGE
        )
    except StorageUnavailable as exc:
        logger.warning("cancellation not recorded: %s", exc)
        return lambda send: _jsonrpc.send_retry_later(
            send, 503, _jsonrpc.INTERNAL_ERROR, _STORAGE_MESSAGE
        )
    return None


async def _cancel_once_accepted(
    middleware: Front,
    scope: Scope,
    receive: Receive,
    send: Send,
    body: bytes,
    caller: str,
    request_id: object,
    params: dict[Any, Any],
    stateless: bool,
) -> None:
    """Hand the notification to the app; record it when the app accepts it (202).
    The registry's error (quota, storage) replaces a stateless app's 202, which did
    nothing; a stateful app's 202 stands, as its own cancellation of the call ran."""
    replaced = False

    async def gate(message: Message) -> None:
        nonlocal replaced
        if replaced:
            return  # the rest of the app's 202
        if message["type"] == "http.response.start" and message.get("status") == 202:
            error_answer = await _record(middleware, caller, request_id, params)
            if error_answer is not None and stateless:
                replaced = True
                await error_answer(send)
                return
        await send(message)

    await middleware.app(scope, replay(body, None, receive), gate)


def _authenticated(scope: Scope) -> bool:
    """Whether an authentication middleware in front of this one authenticated the
    request (Starlette's ``scope["user"]``)."""
    return bool(getattr(scope.get("user"), "is_authenticated", False))
