"""Blinker signals whose ``send`` remembers who receives (private).

``blinker.Signal.send`` works out its receivers on every call: a set union, an id, a
weak-reference lookup and a coroutine check per receiver, about 2 µs with one receiver,
which is as much as the ``cancel()`` that sends it. :class:`Signal` keeps, per sender, the
receivers found the last time, as weak references, and works them out again only after a
``connect`` or ``disconnect`` or when one of them has died. What receives a signal, and in
what order, is exactly what blinker would choose: the cache is filled from blinker's own
``receivers_for``, and anything unusual (an async wrapper, a muted signal, a sender that
cannot be weakly referenced, an async receiver) goes through blinker's ``send`` itself.

The registry's hot paths send with :attr:`Signal.fire`, which builds no result list. A
signal that declares its keyword arguments gets a ``fire`` compiled for exactly those (as
``dataclasses`` compiles an ``__init__``): they are passed on by name, with no ``**kwargs``
dict packed by the call and unpacked again for the receiver, about a third of what sending
to one receiver costs.
"""

from __future__ import annotations

import inspect
import keyword
import threading
import weakref
from collections.abc import Callable, Sequence
from types import MethodType
from typing import Any

from blinker import ANY, NamedSignal

__all__ = ["Signal"]

#: A cached receiver: ``(weak reference to the bound method's object, its function)`` for
#: a bound method, ``(None, weak reference to it)`` for anything else.
_Call = tuple["weakref.ref[Any] | None", Any]
#: A sender's cache entry: ``(weak reference to the sender, generation, receivers)``;
#: ``receivers`` is ``None`` when one is a coroutine function (left to blinker).
_Entry = tuple["weakref.ref[Any]", int, "tuple[_Call, ...] | None"]


def _call(receiver: Callable[..., Any]) -> _Call:
    """How the cache holds *receiver*: weakly, as blinker's weak connections do, and
    callable without building a ``WeakMethod`` each time (a bound method is its object's
    weak reference and its function; a callable that cannot be weakly referenced is held
    strongly, as blinker then holds it too, and a ``disconnect`` drops the cache)."""
    if inspect.ismethod(receiver):
        try:
            return weakref.ref(receiver.__self__), receiver.__func__
        except TypeError:
            pass
    else:
        try:
            return None, weakref.ref(receiver)
        except TypeError:
            pass
    return None, lambda: receiver


class Signal(NamedSignal):
    """A ``blinker.NamedSignal`` with a per-sender cache of its receivers.

    *arguments*, when given, are the keyword arguments every send of this signal carries;
    :attr:`fire` then takes exactly those, each required.
    """

    #: :meth:`send` for a caller that ignores what the receivers return (the registry's
    #: hot paths): ``fire(sender, **arguments)`` calls the same receivers, in the same
    #: order, with no result list built. Compiled per signal (see the module's docstring).
    fire: Callable[..., None]

    def __init__(
        self, name: str, doc: str | None = None, arguments: Sequence[str] | None = None
    ) -> None:
        super().__init__(name, doc)
        self._generation = 0
        self._lock = threading.Lock()
        # By id(sender): one dict lookup on the hot path. The entry's weak reference tells
        # a reused id from the sender, and its callback drops the entry with the sender.
        self._cache: dict[int, _Entry] = {}
        #: The keyword arguments of every send, or ``None`` when they are not declared.
        self.arguments = None if arguments is None else tuple(arguments)
        self.fire = _compile_fire(self, self.arguments)

    def connect(self, receiver: Any, sender: Any = ANY, weak: bool = True) -> Any:
        with self._lock:
            self._generation += 1
        return super().connect(receiver, sender, weak)

    def disconnect(self, receiver: Any, sender: Any = ANY) -> None:
        with self._lock:
            self._generation += 1
        super().disconnect(receiver, sender)

    def _resolve(self, sender: Any) -> tuple[_Call, ...] | None:
        """Cache the receivers for *sender* and return them (``None`` if one is a
        coroutine function; raises ``TypeError`` for a sender that cannot be weakly
        referenced)."""
        with self._lock:
            generation = self._generation
        receivers = list(self.receivers_for(sender))
        calls = None
        if not any(inspect.iscoroutinefunction(r) for r in receivers):
            calls = tuple(_call(r) for r in receivers)
        key = id(sender)
        cache = self._cache

        def forget(ref: weakref.ref[Any]) -> None:
            entry = cache.get(key)
            if entry is not None and entry[0] is ref:
                cache.pop(key, None)

        ref = weakref.ref(sender, forget)
        with self._lock:
            cache[key] = (ref, generation, calls)
        return calls

    def send(
        self,
        sender: Any | None = None,
        /,
        *,
        _async_wrapper: Any = None,
        **kwargs: Any,
    ) -> list[tuple[Callable[..., Any], Any]]:
        if _async_wrapper is not None or self.is_muted:
            return super().send(sender, _async_wrapper=_async_wrapper, **kwargs)
        entry = self._cache.get(id(sender))
        if entry is not None and entry[1] == self._generation and entry[0]() is sender:
            calls = entry[2]
        else:
            try:
                calls = self._resolve(sender)
            except TypeError:  # not weakly referenceable: blinker's way
                return super().send(sender, **kwargs)
        if calls is None:
            return super().send(sender, **kwargs)
        # Every receiver is looked up before any is called: if one has died, blinker
        # (which cleaned it up) sends to the rest, exactly once each.
        targets = []
        for obj_ref, function in calls:
            target = function() if obj_ref is None else obj_ref()
            if target is None:
                with self._lock:
                    self._cache.pop(id(sender), None)
                return super().send(sender, **kwargs)
            targets.append(target)
        results: list[tuple[Callable[..., Any], Any]] = []
        for (obj_ref, function), target in zip(calls, targets, strict=True):
            if obj_ref is None:
                results.append((target, target(sender, **kwargs)))
            else:
                results.append((MethodType(function, target), function(target, sender, **kwargs)))
        return results


# Every name of the template but ``sender`` starts with "_", as no argument name may: an
# argument can never shadow one of them.
_FIRE = """
def _make(_signal, _cache_get, _id):
    def fire(sender, /, {params}):
        _entry = _cache_get(_id(sender))
        if _entry is not None and _entry[1] == _signal._generation and _entry[0]() is sender:
            _calls = _entry[2]
            if _calls is not None and not _signal.is_muted:
                if not _calls:  # nobody listening: a cached lookup, nothing else
                    return
                if len(_calls) == 1:  # the usual case: one bridge
                    _obj_ref, _function = _calls[0]
                    if _obj_ref is None:
                        _target = _function()
                        if _target is not None:
                            _target(sender, {passes})
                            return
                    else:
                        _target = _obj_ref()
                        if _target is not None:
                            _function(_target, sender, {passes})
                            return
        # A cache miss, a dead receiver, several receivers, an async one, or muted.
        _signal.send(sender, {passes})

    return fire
"""


def _compile_fire(signal: Signal, arguments: tuple[str, ...] | None) -> Callable[..., None]:
    """*signal*'s ``fire``: with declared *arguments*, a function that takes exactly those
    by name and passes them on by name; without, one that takes and passes ``**kwargs``."""
    if arguments is None:
        params = passes = "**kwargs"
    else:
        for name in arguments:
            if not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_"):
                raise ValueError(f"not a signal argument name: {name!r}")
            if name == "sender":
                raise ValueError("'sender' is the signal's positional argument")
        if len(set(arguments)) != len(arguments):
            raise ValueError(f"repeated signal argument names: {arguments!r}")
        params = ("*, " + ", ".join(arguments)) if arguments else ""
        passes = ", ".join(f"{name}={name}" for name in arguments)
    namespace: dict[str, Any] = {}
    exec(compile(_FIRE.format(params=params, passes=passes), "<signal fire>", "exec"), namespace)
    fire: Callable[..., None] = namespace["_make"](signal, signal._cache.get, id)
    fire.__qualname__ = f"Signal.fire[{signal.name}]"
    fire.__doc__ = f"Send {signal.name!r} to its receivers, ignoring what they return."
    return fire
