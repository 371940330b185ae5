"""The cancellation registry: ids, scopes, quota, cap, owners and signals.

:class:`CancellationRegistry` knows nothing of HTTP. It validates request ids, applies the
per-scope quota (the only bound that rejects) and the global cap (which evicts), tracks which
requests are in flight and who owns them, sweeps expired and orphaned rows, and reports each
of these through :mod:`mcp_cancellation.signals`. Rows live in a
:class:`~mcp_cancellation.storage.Storage`: :class:`~mcp_cancellation.MemoryStorage` by
default, or a shared one such as :class:`~mcp_cancellation.RedisStorage`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import NamedTuple

from . import signals
from ._config import UNSET, _Unset, int_limit, seconds
from ._errors import (
    CancellationLimitReached,
    ConfigurationError,
    InvalidRequestId,
)
from ._ids import normalize_id
from ._janitor import Janitor
from ._owners import Owners
from ._quota import QUOTA_MODES, QuotaMode, QuotaOverrides, QuotaPolicy
from ._quota import quota_mode as quota_mode_of
from ._reason import MAX_REASON_CHARS, sanitize_reason
from ._request_context import RequestContext
from ._token import OPERATOR, RequestToken
from .scope import rows_by_kind
from .storage import storage_from_environment
from .storage._base import AddResult, InFlightRequest, Limits, Storage, StorageStats

__all__ = [
    "QUOTA_MODES",
    "CancellationRegistry",
    "CleanupResult",
    "QuotaMode",
    "QuotaOverrides",
    "RequestContext",
]

logger = logging.getLogger("mcp_cancellation")


class CleanupResult(NamedTuple):
    """What one :meth:`CancellationRegistry.cleanup` pass removed."""

    removed: int
    in_flight_removed: int


class CancellationRegistry:
    """Records cancellations and in-flight requests, keyed by ``(scope, request_id)``.

    Limits are keyword arguments; when one is not given it is read from the environment
    (``MCP_CANCELLATION_MAX_ROWS``, ``MCP_CANCELLATION_MAX_ROWS_PER_SCOPE``,
    ``MCP_CANCELLATION_TTL``, ``MCP_CANCELLATION_JANITOR_INTERVAL``), else the default.
    ``None`` disables a limit; anything invalid raises
    :class:`~mcp_cancellation.ConfigurationError` here, not at the first request.
    """

    def __init__(
        self,
        storage: Storage | None = None,
        *,
        max_rows: int | _Unset | None = UNSET,
        max_rows_per_scope: int | _Unset | None = UNSET,
        ttl: float | _Unset | None = UNSET,
        janitor_interval: float | _Unset | None = UNSET,
        max_reason_chars: int = MAX_REASON_CHARS,
        cancel_grace: float | _Unset = UNSET,
        quota_mode: QuotaMode | _Unset = UNSET,
        quota_overrides: QuotaOverrides | None = None,
        track_wait: float | _Unset = UNSET,
    ) -> None:
        self._quota_mode = quota_mode_of(None if isinstance(quota_mode, _Unset) else quota_mode)
        self._limits = Limits(
            max_rows=int_limit("max_rows", max_rows, "MCP_CANCELLATION_MAX_ROWS", 10_000),
            max_rows_per_scope=int_limit(
                "max_rows_per_scope",
                max_rows_per_scope,
                "MCP_CANCELLATION_MAX_ROWS_PER_SCOPE",
                256,
            ),
            shadow_quota=self._quota_mode == "shadow",
        )
        self._quota = QuotaPolicy(self._limits, quota_overrides)
        self._ttl = seconds("ttl", ttl, "MCP_CANCELLATION_TTL", 300.0)
        self._janitor_interval = seconds(
            "janitor_interval", janitor_interval, "MCP_CANCELLATION_JANITOR_INTERVAL", 60.0
        )
        grace = seconds("cancel_grace", cancel_grace, "MCP_CANCELLATION_CANCEL_GRACE", 5.0)
        if grace is None:
            raise ConfigurationError("cancel_grace must be a number of seconds, not None")
        self._cancel_grace = grace
        wait = seconds("track_wait", track_wait, "MCP_CANCELLATION_TRACK_WAIT", 0.5, zero=True)
        if wait is None:
            raise ConfigurationError("track_wait must be a number of seconds, not None")
        self._track_wait = wait
        if isinstance(max_reason_chars, bool) or not isinstance(max_reason_chars, int):
            raise ConfigurationError(f"max_reason_chars must be an int, not {max_reason_chars!r}")
        self._max_reason_chars = max_reason_chars
        self._storage: Storage = storage if storage is not None else storage_from_environment()
        self.instance_id = uuid.uuid4().hex[:12]
        self._storage.bind(self.instance_id)
        self._owners = Owners(self.instance_id + ":")
        self._janitor = Janitor(self.cleanup, self._janitor_interval)
        self._shutdown_hooks: list[Callable[[], Awaitable[None]]] = []
        self._shut_down = False

    # -- configuration -----------------------------------------------------------------

    @property
    def storage(self) -> Storage:
        return self._storage

    @property
    def owners(self) -> Owners:
        """The live request owners (tasks or threads with rows in flight)."""
        return self._owners

    @property
    def limits(self) -> Limits:
        return self._limits

    @property
    def max_rows(self) -> int | None:
        return self._limits.max_rows

    @property
    def max_rows_per_scope(self) -> int | None:
        return self._limits.max_rows_per_scope

    @property
    def ttl(self) -> float | None:
        return self._ttl

    @property
    def janitor_interval(self) -> float | None:
        return self._janitor_interval

    @property
    def quota_mode(self) -> QuotaMode:
        """``enforce`` (refuse past the quota) or ``shadow`` (record, and report what
        enforcing would have refused as ``cancellation.rejected`` with ``mode="shadow"``)."""
        return self._quota_mode

    def quota_for(self, scope: str) -> int | None:
        """The quota of *scope*: its override if it has one, else ``max_rows_per_scope``."""
        return self._quota.limits_for(scope).max_rows_per_scope

    @property
    def track_wait(self) -> float:
        """Seconds :meth:`cancel_in_flight` waits, for a request of the id it did not find
        in flight, for that request's track: a call whose track was still on its way (its
        worker's event loop busy) is cancelled if it is tracked meanwhile; nothing of the
        cancellation outlives its answer, so a later request of the id never is."""
        return self._track_wait

    @property
    def cancel_grace(self) -> float:
        """Seconds a cancelled request may keep running before it counts as ignoring its
        cancellation (``ignored`` in ``request.stopped``, :meth:`ignoring`)."""
        return self._cancel_grace

    def ignoring(self, grace: float | None = None) -> list[RequestToken]:
        """The ``request()`` blocks of this process still running more than *grace*
        seconds (default :attr:`cancel_grace`) after their cancellation reached it: work
        that ignores its cancellation. Costs one pass over this process's in-flight
        requests."""
        limit = time.monotonic() - (self._cancel_grace if grace is None else grace)
        return [
            token
            for token in self._owners.tokens()
            if token.cancelled and (token.cancelled_at or 0.0) < limit
        ]

    def __repr__(self) -> str:
        return (
            f"<CancellationRegistry storage={self._storage.name} max_rows={self.max_rows} "
            f"max_rows_per_scope={self.max_rows_per_scope} ttl={self._ttl}>"
        )

    # -- cancellations -----------------------------------------------------------------

    def _report(
        self, result: AddResult, key: str, scope: str, text: str | None, method: str | None
    ) -> bool:
        """Send the signals of one storage ``add`` and turn a quota refusal into the error.
        Returns whether a cancellation was recorded."""
        evicted = result.evicted
        if evicted:
            # A flood's batch is thousands of one-row scopes: the batch signal costs once
            # (the bridges take it), the per-scope one only if someone listens to it.
            if signals.cancellation_evicted_batch.receivers:
                kinds = result.evicted_kinds
                if kinds is None:
                    kinds = rows_by_kind(evicted)
                signals.cancellation_evicted_batch.send(
                    self, evicted=evicted, rows=sum(kinds.values()), kinds=kinds
                )
            if signals.cancellation_evicted.receivers:
                for evicted_scope, count in evicted:
                    signals.cancellation_evicted.send(self, scope=evicted_scope, count=count)
        outcome = result.outcome
        if outcome == "quota":
            if signals.cancellation_rejected.receivers:
                signals.cancellation_rejected.send(
                    self, scope=scope, request_id=key, reason="quota", mode="enforce"
                )
            raise CancellationLimitReached(scope, self.quota_for(scope) or 0)
        if result.over_quota and signals.cancellation_rejected.receivers:
            signals.cancellation_rejected.send(
                self, scope=scope, request_id=key, reason="quota", mode="shadow"
            )
        if outcome == "not_in_flight":
            return False
        # An operator's cancellation is reported by the tokens it flips, in the process
        # whose call it stops (see _token_cancelled), not here: the operator's process
        # (the CLI, or an admin app on another worker) runs none of them.
        if method != OPERATOR and signals.request_cancelled.receivers:
            signals.request_cancelled.send(
                self, request_id=key, scope=scope, reason=text, method=method
            )
        return True

    async def cancel(
        self,
        request_id: object,
        reason: object = None,
        scope: str = "global",
        *,
        method: str | None = None,
    ) -> None:
        """Record a cancellation of *request_id* in *scope*, in flight or not.

        Raises :class:`~mcp_cancellation.InvalidRequestId` for a bad id (nothing is
        written) and :class:`~mcp_cancellation.CancellationLimitReached` when *scope*
        already holds ``max_rows_per_scope`` rows. ``None`` is a no-op. *method* is carried
        to signal receivers (``"notifications/cancelled"`` when it came from one).
        """
        if request_id is None:
            return
        await self._record(request_id, reason, scope, method, False)

    async def cancel_in_flight(
        self,
        request_id: object,
        reason: object = None,
        scope: str = "global",
        *,
        method: str | None = None,
    ) -> bool:
        """Record a cancellation only if *request_id* is in flight in *scope*.

        Returns whether it was recorded. This is what the middleware calls for a client's
        ``notifications/cancelled``: unknown or finished ids are ignored, so a caller can
        neither fill the table with ids that do not exist nor touch another scope.
        """
        if request_id is None:
            return False
        return await self._record(request_id, reason, scope, method, True)

    def _prepare(
        self, request_id: object, reason: object, scope: str
    ) -> tuple[str, str | None, Limits]:
        """What cancel() and cancel_in_flight() hand the storage: the row key, the
        sanitised reason and the scope's limits. An invalid id raises, and is reported
        (only here is it an abuse signal; reads given one raise too)."""
        try:
            key = normalize_id(request_id)
        except InvalidRequestId:
            if signals.cancellation_rejected.receivers:
                signals.cancellation_rejected.send(
                    self, scope=scope, request_id=None, reason="invalid_request_id", mode="enforce"
                )
            raise
        text = None if reason is None else sanitize_reason(reason, self._max_reason_chars)
        quota = self._quota
        return key, text, quota.limits_for(scope) if quota.overridden else self._limits

    async def _record(
        self,
        request_id: object,
        reason: object,
        scope: str,
        method: str | None,
        in_flight: bool,
        *,
        quota: bool = True,
    ) -> bool:
        """cancel(), cancel_in_flight() and cancel_as_operator() (without the *quota*): one
        storage call, then the signals."""
        key, text, limits = self._prepare(request_id, reason, scope)
        if not quota:
            limits = dataclasses.replace(limits, max_rows_per_scope=None, shadow_quota=False)
        result = await self._storage.add(
            scope,
            key,
            text,
            limits=limits,
            require_in_flight=in_flight,
            operator=method == OPERATOR,
            # (An operator cancels what the table lists: nothing to wait for.)
            track_wait=self._track_wait if in_flight and method != OPERATOR else 0.0,
        )
        return self._report(result, key, scope, text, method)

    def cancel_token(
        self, token: RequestToken, reason: str | None = None, *, method: str | None = None
    ) -> bool:
        """Cancel the one request *token* belongs to, in this process only, and report it
        (``request.cancelled`` with *method*) unless it was cancelled already. Writes no
        row: a row is keyed by scope and id, so it would cancel every request of the scope
        that uses the same id (the middleware uses this when a client closes its stream).
        Returns whether the token was not cancelled before."""
        if token.cancelled:
            return False
        token._cancel(reason)
        if signals.request_cancelled.receivers:
            signals.request_cancelled.send(
                self, request_id=token.request_id, scope=token.scope, reason=reason, method=method
            )
        return True

    def _token_cancelled(self, token: RequestToken, reason: str | None, method: str) -> None:
        """A token this registry tracks was flipped by a cancellation of *method* that any
        process may have issued (an operator's): report it here, where the call runs."""
        if signals.request_cancelled.receivers:
            signals.request_cancelled.send(
                self, request_id=token.request_id, scope=token.scope, reason=reason, method=method
            )

    async def cancel_as_operator(
        self, request_id: object, reason: object = None, scope: str = "global"
    ) -> bool:
        """An operator's cancellation of *request_id* in *scope*, if it is in flight: as
        :meth:`cancel_in_flight`, except that the scope's quota does not apply (the cap
        still does), and ``request.cancelled`` carries ``method="operator"``. Returns
        whether it was recorded."""
        return await self._record(request_id, reason, scope, OPERATOR, True, quota=False)

    async def requests(self) -> list[InFlightRequest]:
        """Every request in flight in the registry's table, in every process that shares
        it (an operator's view: a read of the whole in-flight table)."""
        return await self._storage.in_flight_requests()

    async def is_cancelled(self, request_id: object, scope: str = "global") -> bool:
        """Whether a cancellation row exists for *request_id* in *scope*."""
        if request_id is None:
            return False
        present, _ = await self._storage.get(scope, normalize_id(request_id))
        return present

    async def reason(self, request_id: object, scope: str = "global") -> str | None:
        """The sanitised reason of a recorded cancellation, or ``None``."""
        if request_id is None:
            return None
        _, text = await self._storage.get(scope, normalize_id(request_id))
        return text

    async def clear(self, request_id: object, scope: str = "global") -> None:
        """Remove the cancellation row of *request_id*; absent rows cost only a read."""
        if request_id is None:
            return
        await self._storage.remove(scope, normalize_id(request_id))

    # -- in-flight requests ------------------------------------------------------------

    async def track(self, request_id: object, scope: str = "global") -> RequestToken:
        """Mark *request_id* in flight in *scope*, owned by the current task (or thread).

        Returns the request's token. Prefer :meth:`request`, which also untracks and clears.
        """
        if request_id is None:
            return RequestToken("", scope)
        key = normalize_id(request_id)
        owner = self._owners.for_current()
        token = RequestToken(key, scope)
        await self._storage.track(scope, key, owner.id, token)
        self._owners.tracked(owner, (scope, key))
        return token

    async def untrack(self, request_id: object, scope: str = "global") -> None:
        """Remove the current task's (or thread's) in-flight row for *request_id* only."""
        if request_id is None:
            return
        key = normalize_id(request_id)
        owner = self._owners.current()
        if owner is None:
            return
        await self._storage.untrack(scope, key, owner.id)
        self._owners.untracked(owner, (scope, key))

    async def in_flight(self, request_id: object, scope: str = "global") -> bool:
        """Whether any owner has *request_id* in flight in *scope*."""
        if request_id is None:
            return False
        return await self._storage.is_tracked(scope, normalize_id(request_id))

    def request(
        self,
        request_id: object,
        scope: str = "global",
        *,
        tool: str | None = None,
        labels: dict[str, str] | None = None,
        at_start: bool = False,
    ) -> RequestContext:
        """``async with registry.request(id, scope) as token``: track the request for the
        block, make it the current request for :func:`~mcp_cancellation.cancelled`, then
        untrack it and clear its cancellation whatever the outcome. *tool* names the tool
        it calls, as a metric label (see :attr:`RequestToken.tool`); *labels* are the
        attributes of the operation, as the integration that serves it names them
        (:attr:`RequestToken.labels`), for ``request.ended``; with *at_start*, a shared
        storage tracks it at its start rather than once it has run its ``track_delay``
        (long work an operator must always see). If it was cancelled, the block's exit
        sends ``request.stopped``; every block's exit sends ``request.ended``."""
        token = RequestToken("", scope, tool, labels=labels, at_start=at_start)
        token._report = self._token_cancelled
        return RequestContext(self, self._owners, self._storage, request_id, token)

    # -- maintenance -------------------------------------------------------------------

    async def cleanup(self, ttl: float | None = None) -> CleanupResult:
        """Remove cancellation rows older than *ttl* (``None``: the registry's ``ttl``,
        which may itself be ``None`` to expire nothing) and the in-flight rows of owners
        that finished or died without untracking."""
        limit = self._ttl if ttl is None else seconds("ttl", ttl, None, None)
        started = time.perf_counter()
        start_ns = time.time_ns()
        dead = self._owners.dead()
        removed, in_flight_removed = await self._storage.cleanup(limit, [o.id for o in dead])
        self._owners.forget(dead)
        result = CleanupResult(removed, in_flight_removed)
        if signals.cancellation_cleanup.receivers:
            signals.cancellation_cleanup.send(
                self,
                removed=removed,
                in_flight_removed=in_flight_removed,
                duration=time.perf_counter() - started,
                start_time_ns=start_ns,
            )
        return result

    async def stats(self) -> StorageStats:
        """Rows and in-flight rows per scope, read from the storage."""
        return await self._storage.stats()

    def start_janitor(self) -> None:
        """Run :meth:`cleanup` every ``janitor_interval`` seconds on the running loop.

        Idempotent; does nothing when ``janitor_interval`` is ``None``.
        """
        self._janitor.start()

    @property
    def janitor_running(self) -> bool:
        return self._janitor.running

    async def stop_janitor(self) -> None:
        """Stop the janitor and wait for it to finish."""
        await self._janitor.stop()

    def on_shutdown(self, hook: Callable[[], Awaitable[None]]) -> None:
        """Await *hook* in :meth:`shutdown`, before the storage closes (the tasks
        extension drains its running tasks there)."""
        self._shutdown_hooks.append(hook)

    async def shutdown(self) -> None:
        """Run the shutdown hooks once, in order (a hook that fails is logged): the
        middleware calls it on the app's lifespan shutdown, :meth:`aclose` too."""
        if self._shut_down:
            return
        self._shut_down = True
        for hook in self._shutdown_hooks:
            try:
                await hook()
            except Exception:
                logger.exception("a shutdown hook of the cancellation registry failed")

    async def aclose(self) -> None:
        """Run the shutdown hooks, stop the janitor and close the storage."""
        await self.shutdown()
        await self.stop_janitor()
        await self._storage.aclose()

    async def __aenter__(self) -> CancellationRegistry:
        self.start_janitor()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
