"""Request owners: the asyncio task or thread behind each in-flight row of one registry.

The registry hands every storage an owner id per request (``<instance>:<n>``) so that two
requests reusing an id each hold their own row, and :meth:`Owners.dead` lets cleanup sweep
the rows of owners that ended without untracking.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._token import RequestToken

__all__ = ["Owner", "Owners", "TrackOwner", "current_owner_object"]


class Owner:
    """A request owner. Held strongly, and only while it has rows in flight: a finished
    task or a dead thread is then seen by :meth:`Owners.dead`. ``token`` is the request's
    token for a ``request()`` block (``None`` for a ``track()`` owner, which may hold
    several)."""

    __slots__ = ("id", "obj", "token")

    id: str
    obj: object
    token: RequestToken | None

    def alive(self) -> bool:
        obj = self.obj
        if isinstance(obj, asyncio.Future):
            # A task left pending on a closed loop (its thread gone) can never finish.
            return not obj.done() and not obj.get_loop().is_closed()
        if isinstance(obj, threading.Thread):
            return obj.is_alive()
        return True


class TrackOwner(Owner):
    """The owner behind ``registry.track()``: one per task or thread, kept while it has
    rows in flight."""

    __slots__ = ("keys",)

    def __init__(self, owner_id: str, obj: object) -> None:
        self.id = owner_id
        self.obj = obj
        self.token = None
        self.keys: set[tuple[str, str]] = set()


def current_owner_object() -> object:
    """The running asyncio task, or else the current thread."""
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no running loop: a plain thread
        task = None
    return task if task is not None else threading.current_thread()


class Owners:
    """Every live owner of one registry, by id.

    Plain dict operations are atomic under the GIL, so the ``request()`` hot path enters
    and leaves without the lock; ``track()`` owners (one per task or thread) take it.
    """

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self._counter = itertools.count(1)
        self._lock = threading.Lock()
        self._live: dict[str, Owner] = {}
        self._of: dict[int, TrackOwner] = {}  # id(task or thread) -> its track() owner

    def new_id(self) -> str:
        return self._prefix + str(next(self._counter))

    def enter(self, owner: Owner, obj: object) -> str:
        """Give *owner* a fresh id, owned by *obj* (a task or thread), and hold it live
        until :meth:`leave`; its id. One call: the ``request()`` hot path enters once."""
        owner.id = owner_id = self._prefix + str(next(self._counter))
        owner.obj = obj
        self._live[owner_id] = owner
        return owner_id

    def leave(self, owner_id: str) -> None:
        self._live.pop(owner_id, None)

    def for_current(self) -> TrackOwner:
        """The current task's (or thread's) ``track()`` owner, created on first use."""
        obj = current_owner_object()
        with self._lock:
            owner = self._of.get(id(obj))
            if owner is not None and owner.obj is obj:
                return owner
            # A stale entry (its task or thread is gone and its id was reused) stays live
            # so that cleanup sees it dead and sweeps its rows.
            owner = TrackOwner(self.new_id(), obj)
            self._live[owner.id] = owner
            self._of[id(obj)] = owner
            return owner

    def current(self) -> TrackOwner | None:
        """The current task's (or thread's) ``track()`` owner, if it has one."""
        obj = current_owner_object()
        with self._lock:
            owner = self._of.get(id(obj))
            return owner if owner is not None and owner.obj is obj else None

    def tracked(self, owner: TrackOwner, row: tuple[str, str]) -> None:
        with self._lock:
            owner.keys.add(row)

    def untracked(self, owner: TrackOwner, row: tuple[str, str]) -> None:
        """Forget *row*; an owner with no row left is forgotten too."""
        with self._lock:
            owner.keys.discard(row)
            if not owner.keys:
                self._live.pop(owner.id, None)
                if self._of.get(id(owner.obj)) is owner:
                    del self._of[id(owner.obj)]

    def tokens(self) -> list[RequestToken]:
        """The tokens of the live ``request()`` blocks (a snapshot)."""
        return [o.token for o in list(self._live.values()) if o.token is not None]

    def dead(self) -> list[Owner]:
        return [owner for owner in list(self._live.values()) if not owner.alive()]

    def forget(self, dead: list[Owner]) -> None:
        """Forget owners that cleanup swept, and ``track()`` entries of ended owners."""
        with self._lock:
            for owner in dead:
                self._live.pop(owner.id, None)
            for key in [k for k, o in self._of.items() if not o.alive()]:
                del self._of[key]

    def __len__(self) -> int:
        """Owners with rows in flight (a request, or a task or thread that tracked)."""
        return len(self._live)
