"""Which session a request belongs to: the SDK's own session table, or else the session
ids the server issued, learned from its answers (private).

A stateful MCP server names each session in the ``Mcp-Session-Id`` header of its answer to
``initialize``; its clients then send that id with every request. The id is the server's
own, random and secret (the SDK's is a UUID), so a request that carries an id the server
issued belongs to that session. Scoping such a request by its session keeps two sessions
at one address apart, as the SDK's own per-session dispatch does; an id the server never
issued is only a header that any client can set, and scopes nothing.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

from .._asgi import Message, Send

if TYPE_CHECKING:
    from ._transport import Transport

__all__ = ["MAX_SESSIONS", "SESSION_HEADER", "IssuedSessions", "session_open"]

SESSION_HEADER = b"mcp-session-id"
#: The most session ids remembered; the least recently used is forgotten first (its
#: requests then fall back to the principal or address scope).
MAX_SESSIONS = 65_536
#: Longer values are not remembered (the SDK's ids are 32 hexadecimal digits).
_MAX_ID_BYTES = 256


class IssuedSessions(OrderedDict[str, None]):
    """A bounded, least-recently-used set of the session ids the server issued (an ordered
    dict, so that the middleware's "any session yet?" is a C-level truth test)."""

    def __init__(self, limit: int = MAX_SESSIONS) -> None:
        super().__init__()
        self.limit = limit

    def known(self, session_id: str) -> bool:
        """Whether the server issued *session_id* (and it was not forgotten since)."""
        if session_id not in self:
            return False
        self.move_to_end(session_id)
        return True

    def learn(self, session_id: bytes) -> None:
        """Remember *session_id*, as the server sent it in a response header."""
        if not session_id or len(session_id) > _MAX_ID_BYTES:
            return
        text = session_id.decode("latin-1")
        self[text] = None
        self.move_to_end(text)
        while len(self) > self.limit:
            self.popitem(last=False)

    def forget(self, session_id: str) -> None:
        """The session ended: its id scopes nothing any more."""
        self.pop(session_id, None)

    def learning(self, send: Send) -> Send:
        """*send*, remembering the session id of the answer it starts, if it names one."""

        async def learning_send(message: Message) -> None:
            if _accepted(message):
                for key, value in message.get("headers") or ():
                    if key.lower() == SESSION_HEADER:
                        self.learn(value)
                        break
            await send(message)

        return learning_send

    def forgetting(self, session_id: str, send: Send) -> Send:
        """*send*, forgetting *session_id* once the server accepts its termination."""

        async def forgetting_send(message: Message) -> None:
            if _accepted(message):
                self.forget(session_id)
            await send(message)

        return forgetting_send


def _accepted(message: Message) -> bool:
    """Whether *message* starts a successful (2xx) answer."""
    if message["type"] != "http.response.start":
        return False
    status: int = message.get("status", 200)
    return status < 300


def session_open(session_id: str, sessions: IssuedSessions, transport: Transport | None) -> bool:
    """Whether *session_id* names an open session: the SDK's own session table says, when
    the wrapped app is the SDK's (never a second, bounded copy that could forget a session
    the SDK still accepts, and so scope two sessions at one address together); otherwise
    the ids the server issued."""
    if transport is not None:
        found = transport.session_open(session_id)
        if found is not None:
            return found
    return sessions.known(session_id)
