"""``registry.request(id, scope)``: one tracked request, as an async context manager.

Its own owner record (one object per request on the hot path): it tracks the request on
enter, makes its token the current one for :func:`~mcp_cancellation.cancelled`, and on exit
untracks it, clears its cancellation row and, if it was cancelled, sends
``request.stopped``. It works through the registry's public attributes only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from types import TracebackType
from typing import TYPE_CHECKING, Protocol

from . import signals
from ._context import CURRENT_REQUEST
from ._errors import RequestCancelled, StorageUnavailable
from ._ids import normalize_id
from ._owners import Owner, Owners, current_owner_object
from ._token import RequestToken

if TYPE_CHECKING:
    from .storage._base import Storage

__all__ = ["RequestContext", "RequestHost"]


class RequestHost(Protocol):
    """What a request needs of its registry besides its owners and storage: the sender of
    ``request.stopped`` and its grace (a :class:`~mcp_cancellation.CancellationRegistry`)."""

    @property
    def cancel_grace(self) -> float: ...


logger = logging.getLogger("mcp_cancellation")

#: ``_previous`` of a block that has not entered (or has exited).
_OUTSIDE: object = object()


class RequestContext(Owner):
    """The async context manager returned by :meth:`CancellationRegistry.request`.

    It is its own owner record: one object per request on the hot path. It works through
    the registry's :attr:`~CancellationRegistry.owners` and
    :attr:`~CancellationRegistry.storage`, handed to it by the registry.

    Its owner is the running task (or the thread, outside a task): the dead-owner sweep
    releases the rows of an owner that is gone without having exited.
    """

    __slots__ = ("_key", "_owners", "_previous", "_registry", "_scope", "_storage")

    def __init__(
        self,
        registry: RequestHost,
        owners: Owners,
        storage: Storage,
        request_id: object,
        token: RequestToken,
    ) -> None:
        self._registry = registry
        self._owners = owners
        self._storage = storage
        self._scope = token.scope
        # Validate eagerly so a bad id fails before the block runs, writing nothing.
        self._key = key = None if request_id is None else normalize_id(request_id)
        token.request_id = key or ""
        self.token: RequestToken = token
        self.id = ""  # the owner id while tracked; empty outside the block
        self._previous: RequestToken | object | None = _OUTSIDE

    async def __aenter__(self) -> RequestToken:
        token = self.token
        key = self._key
        if key is not None:
            owner_id = self._owners.enter(self, current_owner_object())
            try:
                await self._storage.track(self._scope, key, owner_id, token)
            except StorageUnavailable as exc:
                # The request runs anyway, uncancellable through the storage until it comes
                # back; finish() below still runs, so a storage that registered the token
                # locally before failing releases it.
                logger.warning("tracking request without the storage: %s", exc)
            except BaseException:
                self._owners.leave(owner_id)
                self.id = ""
                raise
        # The previous value, not set()'s reset Token: restoring it holds no 64-byte Token
        # per request in flight (benchmarks/registry.py, 1b.).
        self._previous = CURRENT_REQUEST.get()
        CURRENT_REQUEST.set(token)
        return token

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        previous = self._previous
        if previous is not _OUTSIDE:
            CURRENT_REQUEST.set(previous)  # type: ignore[arg-type]
            self._previous = _OUTSIDE
        if signals.request_ended.receivers:
            self._ended()
        owner_id = self.id
        if not owner_id:
            return
        self.id = ""
        try:
            # Storages complete finish() even if this task is cancelled meanwhile (the very
            # case cancellation produces), so rows never wait for the janitor.
            await self._storage.finish(self._scope, self._key, owner_id)  # type: ignore[arg-type]
        except StorageUnavailable as error:
            # Never turn a finished request into an error: the rows expire with the TTL
            # and the worker heartbeat instead.
            logger.warning("could not release request rows: %s", error)
        finally:
            self._owners.leave(owner_id)
            self.obj = None
            if self.token.cancelled and signals.request_stopped.receivers:
                self._stopped(exc)

    def _ended(self) -> None:
        """Send ``request.ended``: one request served, how long, and whether cancelled."""
        token = self.token
        signals.request_ended.send(
            self._registry,
            request_id=token.request_id,
            scope=self._scope,
            tool=token.tool,
            labels=token.labels,
            seconds=time.monotonic() - token.started,
            cancelled=token.cancelled,
        )

    def _stopped(self, exc: BaseException | None) -> None:
        """Send ``request.stopped``: how the work of this cancelled request ended."""
        token = self.token
        outcome = token.outcome
        if outcome is None:
            cancelled = isinstance(exc, RequestCancelled | asyncio.CancelledError)
            outcome = "stopped" if cancelled or token.observed else "completed"
        elapsed = max(0.0, time.monotonic() - (token.cancelled_at or 0.0))
        registry = self._registry
        signals.request_stopped.send(
            registry,
            request_id=token.request_id,
            scope=self._scope,
            outcome=outcome,
            seconds=elapsed,
            tool=token.tool,
            ignored=elapsed > registry.cancel_grace,
        )
