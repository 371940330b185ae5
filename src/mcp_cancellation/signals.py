"""Blinker signals: the single place the registry reports what happened.

The sender of the registry's signals is the :class:`~mcp_cancellation.CancellationRegistry`;
the sender of ``storage.error`` is the :class:`~mcp_cancellation.storage.Storage` that failed
(``registry.storage``: a storage also fails in its background tasks, where no registry
call is involved). Signals are sent only when a receiver is connected, so an unobserved
registry pays one attribute test.

===============================  =======================================================
signal                           keyword arguments
===============================  =======================================================
``request.cancelled``            ``request_id`` (str), ``scope``, ``reason`` (str | None),
                                 ``method`` (``"notifications/cancelled"`` when it came from
                                 one, ``"disconnect"`` for a closed stream, else None)
``cancellation.cleanup``         ``removed``, ``in_flight_removed``, ``duration`` (seconds),
                                 ``start_time_ns`` (when the pass began, ``time.time_ns()``)
``cancellation.evicted``         ``scope``, ``count``: one signal per scope that lost rows
``cancellation.evicted_batch``   ``evicted`` (the ``(scope, count)`` pairs of one evicting
                                 insert, in eviction order: those of its
                                 ``cancellation.evicted`` signals), ``rows`` (their sum),
                                 ``kinds`` (the rows by scope kind); one signal per
                                 evicting insert, sent before those. A flood evicts
                                 thousands of scopes at once: a receiver that needs no
                                 single scope pays once, not per scope
``cancellation.rejected``        ``scope``, ``request_id`` (str | None), ``reason``
                                 (``"quota"`` or ``"invalid_request_id"``), ``mode``
                                 (``"enforce"``, or ``"shadow"`` for a cancellation a quota in
                                 shadow mode recorded although it would have refused it)
``request.stopped``              a cancelled request's handler ended: ``request_id``,
                                 ``scope``, ``outcome`` (``stopped``, ``killed`` or
                                 ``completed``), ``seconds`` (from the cancellation reaching
                                 this process to the end), ``tool`` (label-safe name or None),
                                 ``ignored`` (it ran longer than the registry's
                                 ``cancel_grace`` after the cancellation); sent once, by the
                                 process that ran the request
``request.ended``                a request's block ended (every request, cancelled or
                                 not): ``request_id``, ``scope``, ``tool`` (label-safe
                                 name or None), ``labels`` (the token's: the operation's
                                 attributes as the integration named them, such as
                                 ``mcp.method.name``), ``seconds`` (from its start),
                                 ``cancelled``;
                                 sent by the process that ran it, only when a receiver
                                 is connected (the bridges' ``mcp.server.operation.duration``)
``task.created``                 a task was created (SEP-2663): ``task_id``, ``scope``,
                                 ``tool`` (label-safe name); sent by the worker that runs it
``task.ended``                   a task's work ended: ``task_id``, ``scope``, ``tool``,
                                 ``status`` (``completed``, ``failed`` or ``cancelled``),
                                 ``seconds`` (from its creation); sent once, by that worker, or
                                 (``orphaned=True``, ``failed``) by the worker whose
                                 ``tasks/get`` or reaper found that worker dead
``task.rejected``                a call that would have been a task ran as a plain call:
                                 ``scope``, ``tool``, ``reason`` (``quota``; ``full``:
                                 the table holds ``max_tasks``; ``unavailable``: the
                                 task table did not answer; ``shutdown``: the server is
                                 stopping)
``storage.error``                ``operation`` (one of
                                 :data:`~mcp_cancellation.storage._base.STORAGE_OPERATIONS`),
                                 ``error`` (the exception); sender: the storage
===============================  =======================================================
"""

from __future__ import annotations

from blinker import NamedSignal, Namespace

__all__ = [
    "cancellation_cleanup",
    "cancellation_evicted",
    "cancellation_evicted_batch",
    "cancellation_rejected",
    "namespace",
    "request_cancelled",
    "request_ended",
    "request_stopped",
    "storage_error",
    "task_created",
    "task_ended",
    "task_rejected",
]

namespace = Namespace()


def _signal(name: str, doc: str) -> NamedSignal:
    """A plain blinker signal of this namespace (``namespace.signal(name)`` returns it)."""
    return namespace.signal(name, doc)


request_cancelled = _signal(
    "request.cancelled",
    "A cancellation was recorded.",
)
request_ended = _signal(
    "request.ended",
    "A request's block ended, cancelled or not (what it was, how long it ran).",
)
request_stopped = _signal(
    "request.stopped",
    "A cancelled request's handler ended (how, and how long after).",
)
cancellation_cleanup = _signal(
    "cancellation.cleanup",
    "A cleanup pass finished (possibly removing nothing).",
)
cancellation_evicted = _signal(
    "cancellation.evicted",
    "The global cap evicted rows of one scope.",
)
cancellation_evicted_batch = _signal(
    "cancellation.evicted_batch",
    "One insert's eviction, whole: every scope that lost rows, in one signal.",
)
cancellation_rejected = _signal(
    "cancellation.rejected",
    "A cancellation was refused (quota or invalid id).",
)
storage_error = _signal(
    "storage.error",
    "A storage operation failed (the storage did not answer).",
)

task_created = _signal("task.created", "A task was created; its tool runs on this worker.")
task_ended = _signal("task.ended", "A task's work ended (its final status).")
task_rejected = _signal(
    "task.rejected", "A call that could have been a task ran as a plain call (quota, storage)."
)
