"""Blinker signals whose ``send`` remembers who receives (private).

``blinker.Signal.send`` works out its receivers on every call: a set union, an id, a
weak-reference lookup and a coroutine check per receiver, about 2 µs with one receiver,
which is as much as the ``cancel()`` that sends it. :class:`Signal` keeps, per sender, the
receivers found the last time, as weak references, and works them out again only after a
``connect`` or ``disconnect`` or when one of them has died. What receives a signal, and in
what order, is exactly what blinker would choose: the cache is filled from blinker's own
``receivers_for``, and anything unusual (an async wrapper, a muted signal, a sender that
cannot be weakly referenced, an async receiver) goes through blinker's ``send`` itself.
"""

from __future__ import annotations

import inspect
import threading
import weakref
from collections.abc import Callable
from typing import Any

from blinker import ANY, NamedSignal

__all__ = ["Signal"]

_Ref = Callable[[], Callable[..., Any] | None]


def _ref(receiver: Callable[..., Any]) -> _Ref:
    """A weak reference to *receiver* (a bound method through ``WeakMethod``), or a strong
    one for a callable that cannot be weakly referenced (blinker then holds it strongly
    too, and a ``disconnect`` drops the cache)."""
    try:
        if inspect.ismethod(receiver):
            return weakref.WeakMethod(receiver)
        return weakref.ref(receiver)
    except TypeError:
        return lambda: receiver


class Signal(NamedSignal):
    """A ``blinker.NamedSignal`` with a per-sender cache of its receivers."""

    def __init__(self, name: str, doc: str | None = None) -> None:
        super().__init__(name, doc)
        self._generation = 0
        self._lock = threading.Lock()
        self._cache: weakref.WeakKeyDictionary[Any, tuple[int, tuple[_Ref, ...] | None]] = (
            weakref.WeakKeyDictionary()
        )

    def connect(self, receiver: Any, sender: Any = ANY, weak: bool = True) -> Any:
        with self._lock:
            self._generation += 1
        return super().connect(receiver, sender, weak)

    def disconnect(self, receiver: Any, sender: Any = ANY) -> None:
        with self._lock:
            self._generation += 1
        super().disconnect(receiver, sender)

    def _resolve(self, sender: Any) -> tuple[_Ref, ...] | None:
        """The receivers for *sender*, or ``None`` if one is a coroutine function (left
        to blinker, which refuses it without an async wrapper)."""
        with self._lock:
            generation = self._generation
        receivers = list(self.receivers_for(sender))
        refs = None
        if not any(inspect.iscoroutinefunction(r) for r in receivers):
            refs = tuple(_ref(r) for r in receivers)
        with self._lock:
            self._cache[sender] = (generation, refs)
        return refs

    def send(
        self,
        sender: Any | None = None,
        /,
        *,
        _async_wrapper: Any = None,
        **kwargs: Any,
    ) -> list[tuple[Callable[..., Any], Any]]:
        if _async_wrapper is not None or self.is_muted or not self.receivers:
            return super().send(sender, _async_wrapper=_async_wrapper, **kwargs)
        try:
            entry = self._cache.get(sender)
        except TypeError:  # not weakly referenceable (or unhashable): blinker's way
            return super().send(sender, **kwargs)
        fresh = entry is not None and entry[0] == self._generation
        refs = entry[1] if fresh and entry is not None else self._resolve(sender)
        if refs is None:
            return super().send(sender, **kwargs)
        receivers = [ref() for ref in refs]
        if None in receivers:  # a weakly connected receiver died: blinker cleans up
            with self._lock:
                self._cache.pop(sender, None)
            return super().send(sender, **kwargs)
        return [(receiver, receiver(sender, **kwargs)) for receiver in receivers]  # type: ignore[misc]
