"""What every telemetry bridge shares: one install/uninstall policy (private).

* :meth:`Bridge.install` connects the bridge's receivers to the signals of its registry
  (of every registry, for a bridge without one) and is idempotent; :meth:`Bridge.uninstall`
  undoes it and is idempotent too. Either may be called again later.
* A registry garbage-collected while bridged disconnects the receivers by itself (blinker
  forgets a dead sender but keeps strong receivers).
* Errors are :class:`~mcp_cancellation.ConfigurationError`: a registry that no longer
  exists, a target already used by another bridge, or a second setup of one registry
  with other options (:class:`Setups`).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Hashable, Mapping
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar

from blinker import ANY

from .. import signals
from .._errors import ConfigurationError
from .._token import OTHER_TOOL
from ..scope import ScopeKind, scope_kind
from ._catalogue import (
    ERROR_TYPE,
    METHOD_NAME,
    PROTOCOL_VERSION,
    TASK_REJECT_REASONS,
    TASK_STATUSES,
    operation_labels,
)
from ._guard import disconnect_all, never_raise

if TYPE_CHECKING:
    from .._registry import CancellationRegistry

__all__ = ["Bridge", "Receivers", "Setups"]

#: ``(signal, receiver)`` pairs a bridge connects.
Receivers = list[tuple[Any, Callable[..., None]]]

#: Signals sent by the registry's storage rather than by the registry.
_STORAGE_SIGNALS = frozenset({signals.storage_error})


def _teardown(receivers: Receivers, also: Callable[[], None] | None) -> None:
    """Run when a bridged registry is garbage-collected without uninstall()."""
    disconnect_all(receivers)
    if also is not None:
        also()


class Bridge:
    """Base of the OpenTelemetry and Prometheus bridges (see the module docstring).

    Subclasses define the receivers named below, and may attach (register exporters)
    before the receivers connect and detach after they disconnect.
    """

    def __init__(self, registry: CancellationRegistry | None) -> None:
        self._registry_ref = weakref.ref(registry) if registry is not None else None
        self._install_lock = threading.Lock()
        self._installed = False
        self._finalizer: weakref.finalize[Any, Any] | None = None

    @property
    def registry(self) -> CancellationRegistry | None:
        """The bridged registry (``None`` for every registry, or once it was collected)."""
        return self._registry_ref() if self._registry_ref is not None else None

    @property
    def installed(self) -> bool:
        return self._installed

    # Each bridge's receivers of the signals below; their keywords are the signal's.
    _on_cancelled: Callable[..., None]
    _on_rejected: Callable[..., None]
    _on_evicted: Callable[..., None]  # takes cancellation_evicted_batch
    _on_cleanup: Callable[..., None]
    _on_storage_error: Callable[..., None]

    def _receivers(self) -> Receivers:
        return [
            (signals.request_cancelled, self._on_cancelled),
            (signals.request_stopped, self._on_stopped),
            (signals.request_ended, self._on_ended),
            (signals.cancellation_rejected, self._on_rejected),
            (signals.cancellation_evicted_batch, self._on_evicted),
            (signals.cancellation_cleanup, self._on_cleanup),
            (signals.storage_error, self._on_storage_error),
            (signals.task_created, self._on_task_created),
            (signals.task_ended, self._on_task_ended),
            (signals.task_rejected, self._on_task_rejected),
        ]

    def _attach(self) -> None:
        """Before the receivers connect (may raise ConfigurationError, undoing itself)."""

    def _detach(self) -> None:
        """After the receivers disconnect."""

    def _skips(self, sender: object) -> bool:
        """Whether to leave *sender*'s signal to another bridge (see the OTel bridge)."""
        return False

    @never_raise
    def _on_stopped(  # the keywords of signals.request_stopped
        self,
        sender: object,
        *,
        scope: str,
        outcome: str,
        seconds: float,
        tool: str | None,
        ignored: bool,
        **_: object,
    ) -> None:
        if not self._skips(sender):
            ignoring = (tool or OTHER_TOOL) if ignored else None
            self._stopped(scope_kind(scope), outcome, seconds, ignoring)

    def _stopped(self, kind: ScopeKind, outcome: str, seconds: float, ignoring: str | None) -> None:
        """A cancelled request of scope *kind* ended with *outcome*, *seconds* after its
        cancellation; *ignoring* is its tool's label if it ran past ``cancel_grace``."""
        raise NotImplementedError

    @never_raise
    def _on_ended(  # the keywords of signals.request_ended
        self,
        sender: object,
        *,
        tool: str | None = None,
        labels: Mapping[str, str] | None = None,
        seconds: float = 0.0,
        cancelled: bool = False,
        **_: object,
    ) -> None:
        # Only a JSON-RPC request an integration served is an MCP operation: one without
        # a method (a task's run, a library's own registry.request()) is not counted.
        if labels and METHOD_NAME in labels and not self._skips(sender):
            values = operation_labels(
                labels[METHOD_NAME],
                tool,
                labels.get(PROTOCOL_VERSION),
                cancelled,
                labels.get(ERROR_TYPE),
            )
            self._ended(values, seconds)

    def _ended(self, labels: tuple[str, ...], seconds: float) -> None:
        """A request ended after *seconds*: *labels* are its bounded
        ``mcp.server.operation.duration`` values (see ``_catalogue.OPERATION_LABELS``;
        the third, ``error.type``, is empty when it succeeded)."""
        raise NotImplementedError

    # -- tasks (counted by the worker that runs each) -----------------------------------

    @never_raise
    def _on_task_created(
        self, sender: object, *, task_id: str, tool: str | None = None, **_: object
    ) -> None:
        if self._skips(sender):
            return
        self._task_created(task_id, tool or OTHER_TOOL)

    @never_raise
    def _on_task_ended(
        self,
        sender: object,
        *,
        task_id: str,
        status: str,
        seconds: float,
        tool: str | None = None,
        orphaned: bool = False,
        **_: object,
    ) -> None:
        if self._skips(sender):
            return
        if status in TASK_STATUSES:
            self._task_ended(task_id, tool or OTHER_TOOL, status, seconds)

    @never_raise
    def _on_task_rejected(self, sender: object, *, scope: str, reason: str, **_: object) -> None:
        if not self._skips(sender) and reason in TASK_REJECT_REASONS:
            self._task_rejected(scope, reason)

    def _task_created(self, task_id: str, tool: str) -> None:
        """A task of *tool* was created; its work runs in this process."""

    def _task_ended(self, task_id: str, tool: str, status: str, seconds: float) -> None:
        """A task's work ended with *status*, *seconds* after its creation."""
        raise NotImplementedError

    def _task_rejected(self, scope: str, reason: str) -> None:
        """A call of *scope* could not be a task (*reason*) and ran as a plain call."""
        raise NotImplementedError

    def _on_registry_collected(self) -> Callable[[], None] | None:
        """Something to do when the registry is collected while bridged, besides
        disconnecting (it must not reference the bridge)."""
        return None

    def install(self) -> Self:
        """Connect to the signals (idempotent). Returns self."""
        with self._install_lock:
            if self._installed:
                return self
            sender: Any = ANY
            if self._registry_ref is not None:
                sender = self._registry_ref()
                if sender is None:
                    raise ConfigurationError("the registry of this bridge no longer exists")
            self._attach()
            receivers = self._receivers()
            for signal, receiver in receivers:
                source = sender
                if signal in _STORAGE_SIGNALS and sender is not ANY:
                    source = sender.storage
                signal.connect(receiver, sender=source, weak=False)
            if sender is not ANY:
                self._finalizer = weakref.finalize(
                    sender, _teardown, receivers, self._on_registry_collected()
                )
            self._installed = True
            return self

    def uninstall(self) -> None:
        """Disconnect from the signals and detach (idempotent)."""
        with self._install_lock:
            if not self._installed:
                return
            self._installed = False
            if self._finalizer is not None:
                self._finalizer.detach()
                self._finalizer = None
            disconnect_all(self._receivers())
            self._detach()


B = TypeVar("B", bound=Bridge)


class Setups(Generic[B]):
    """The bridges a setup function (``instrument()``, ``metrics_app()``) installed, one
    per registry and target: calling it again returns the installed bridge, or raises
    :class:`~mcp_cancellation.ConfigurationError` when it asks for other options."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_registry: weakref.WeakKeyDictionary[CancellationRegistry, dict[Hashable, B]] = (
            weakref.WeakKeyDictionary()
        )
        self._global: dict[Hashable, B] = {}

    def get_or_install(
        self,
        registry: CancellationRegistry | None,
        target: Hashable,
        conflict: Callable[[B], str | None],
        make: Callable[[], B],
    ) -> B:
        """The installed bridge for (*registry*, *target*); *conflict* says why an
        installed one does not fit the new call (or ``None``); else *make* and install."""
        with self._lock:
            table = self._global if registry is None else self._by_registry.setdefault(registry, {})
            bridge = table.get(target)
            if bridge is not None and bridge.installed:
                problem = conflict(bridge)
                if problem is not None:
                    raise ConfigurationError(f"already set up with other options: {problem}")
                return bridge
            bridge = make().install()
            table[target] = bridge
            return bridge

    def find(self, registry: CancellationRegistry | None) -> list[B]:
        with self._lock:
            table = self._global if registry is None else self._by_registry.get(registry, {})
            return [b for b in table.values() if b.installed]

    def remove(self, registry: CancellationRegistry | None) -> list[B]:
        """Forget the bridges of *registry* (with ``None``: every bridge); returns them."""
        with self._lock:
            if registry is None:
                found = [*self._global.values()]
                for table in self._by_registry.values():
                    found += table.values()
                self._global.clear()
                self._by_registry.clear()
                return found
            return list(self._by_registry.pop(registry, {}).values())
