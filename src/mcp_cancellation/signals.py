"""Blinker signals: the single place the registry reports what happened.

The sender of the registry's signals is the :class:`~mcp_cancellation.CancellationRegistry`;
the sender of ``storage.error`` is the :class:`~mcp_cancellation.storage.Storage` that failed
(``registry.storage``: a storage also fails in its background tasks, where no registry
call is involved). Signals are sent only when a receiver is connected, so an unobserved
registry pays one attribute test.

=========================  ==============================================================
signal                     keyword arguments
=========================  ==============================================================
``request.cancelled``      ``request_id`` (str), ``scope``, ``reason`` (str | None),
                           ``method`` (``"notifications/cancelled"`` when it came from
                           one, ``"disconnect"`` for a closed stream, else None)
``cancellation.cleanup``   ``removed``, ``in_flight_removed``, ``duration`` (seconds)
``cancellation.evicted``   ``scope``, ``count``
``cancellation.rejected``  ``scope``, ``request_id`` (str | None), ``reason``
                           (``"quota"`` or ``"invalid_request_id"``)
``storage.error``          ``operation`` (one of
                           :data:`~mcp_cancellation.storage.base.STORAGE_OPERATIONS`),
                           ``error`` (the exception); sender: the storage
=========================  ==============================================================
"""

from __future__ import annotations

from blinker import Namespace

__all__ = [
    "cancellation_cleanup",
    "cancellation_evicted",
    "cancellation_rejected",
    "namespace",
    "request_cancelled",
    "storage_error",
]

namespace = Namespace()

request_cancelled = namespace.signal("request.cancelled", doc="A cancellation was recorded.")
cancellation_cleanup = namespace.signal(
    "cancellation.cleanup", doc="A cleanup pass finished (possibly removing nothing)."
)
cancellation_evicted = namespace.signal(
    "cancellation.evicted", doc="The global cap evicted rows of one scope."
)
cancellation_rejected = namespace.signal(
    "cancellation.rejected", doc="A cancellation was refused (quota or invalid id)."
)
storage_error = namespace.signal(
    "storage.error", doc="A storage operation failed (the storage did not answer)."
)
