"""The package's signals deliver to exactly whom plain blinker would, although their
``send`` caches its receivers: after connects and disconnects, per sender, when a weakly
connected receiver dies, while muted, and for async receivers."""

from __future__ import annotations

import gc
import re
from typing import Any

import blinker
import pytest

from mcp_cancellation import signals
from mcp_cancellation._dispatch import Signal


class Sender:
    """Any object that can be weakly referenced, as a registry can."""


class Receiver:
    def __init__(self, log: list[str], name: str) -> None:
        self.log, self.name = log, name

    def __call__(self, sender: object, **kwargs: Any) -> str:
        self.log.append(self.name)
        return self.name

    def method(self, sender: object, **kwargs: Any) -> str:
        return self(sender, **kwargs)


def _pair() -> tuple[Signal, blinker.Signal]:
    return Signal("ours"), blinker.Signal()


def _received(signal: blinker.Signal, sender: object, log: list[str]) -> list[str]:
    log.clear()
    signal.send(sender, x=1)
    return sorted(log)


def test_the_package_signals_are_cached_and_named() -> None:
    assert isinstance(signals.request_cancelled, Signal)
    assert signals.namespace.signal("request.cancelled") is signals.request_cancelled


def test_connects_disconnects_and_senders_match_blinker() -> None:
    ours, plain = _pair()
    one, two = Sender(), Sender()
    log: list[str] = []
    every, only_one = Receiver(log, "every"), Receiver(log, "one")
    for signal in (ours, plain):
        assert _received(signal, one, log) == []
        signal.connect(every)
        assert _received(signal, one, log) == ["every"]
        signal.connect(only_one, sender=one)
        assert _received(signal, one, log) == ["every", "one"]
        assert _received(signal, two, log) == ["every"]
        signal.disconnect(every)
        assert _received(signal, one, log) == ["one"]
        assert _received(signal, two, log) == []
        with signal.connected_to(every, sender=two):
            assert _received(signal, two, log) == ["every"]
        assert _received(signal, two, log) == []
        signal.disconnect(only_one, sender=one)
        assert _received(signal, one, log) == []


def test_a_weak_receiver_that_dies_is_not_called_again() -> None:
    ours, plain = _pair()
    sender = Sender()
    log: list[str] = []
    for signal in (ours, plain):
        receiver = Receiver(log, "bound")
        signal.connect(receiver.method)  # weak: a WeakMethod in blinker and in the cache
        assert _received(signal, sender, log) == ["bound"]
        del receiver
        gc.collect()
        assert _received(signal, sender, log) == []
        assert not signal.receivers  # blinker cleaned up, as it does for plain signals
        again = Receiver(log, "again")
        signal.connect(again)
        assert _received(signal, sender, log) == ["again"]


def test_return_values_muting_and_unusual_senders() -> None:
    ours = Signal("ours")
    log: list[str] = []
    receiver = Receiver(log, "r")
    ours.connect(receiver)
    assert ours.send(Sender()) == [(receiver, "r")]
    with ours.muted():
        assert ours.send(Sender()) == []
    assert ours.send(None) == [(receiver, "r")]  # no weak reference to None: blinker's way
    assert ours.send("a string sender") == [(receiver, "r")]


def test_an_async_receiver_is_refused_as_blinker_refuses_it() -> None:
    ours = Signal("ours")

    async def receiver(sender: object, **kwargs: Any) -> None:
        return None

    ours.connect(receiver)
    with pytest.raises(RuntimeError, match="coroutine"):
        ours.send(Sender())


@pytest.mark.parametrize("arguments", [None, ("x",)], ids=["any-arguments", "declared"])
def test_fire_reaches_whom_send_reaches(arguments: tuple[str, ...] | None) -> None:
    """``fire`` (the registry's hot-path send) calls the same receivers as blinker's
    ``send``: none, one, several, after a receiver dies, while muted and per sender;
    whether the signal declares its arguments or not."""
    ours, plain = Signal("ours", arguments=arguments), blinker.Signal()
    one, two = Sender(), Sender()
    log: list[str] = []

    def fired(signal: blinker.Signal, sender: object) -> list[str]:
        log.clear()
        if isinstance(signal, Signal):
            signal.fire(sender, x=1)
        else:
            signal.send(sender, x=1)
        return sorted(log)

    for signal in (ours, plain):
        assert fired(signal, one) == []
        assert fired(signal, one) == []
        bound = Receiver(log, "bound")
        signal.connect(bound.method)
        assert fired(signal, one) == ["bound"]
        assert fired(signal, one) == ["bound"]
        plain_fn = Receiver(log, "plain")
        signal.connect(plain_fn, sender=two)
        assert fired(signal, two) == ["bound", "plain"]
        assert fired(signal, one) == ["bound"]
        with signal.muted():
            assert fired(signal, one) == []
            assert fired(signal, two) == []
        del bound
        gc.collect()
        assert fired(signal, one) == []
        assert fired(signal, two) == ["plain"]
        signal.disconnect(plain_fn, sender=two)
        assert fired(signal, two) == []


def test_a_reused_sender_id_is_not_mistaken_for_the_dead_sender() -> None:
    """The cache is keyed by ``id(sender)``; a new sender at a dead one's address (its
    receiver connected for it alone, the cache filled, no disconnect) gets its own
    receivers, not the dead one's."""
    ours = Signal("ours")
    log: list[str] = []
    receiver = Receiver(log, "only-first")
    reused = False
    for _ in range(500):  # CPython reuses freed addresses soon; try until one is
        first = Sender()
        ours.connect(receiver, sender=first)
        log.clear()
        ours.fire(first)
        assert log == ["only-first"]
        dead_id = id(first)
        del first  # freed at once (no cycle), so the next Sender may take its address
        other = Sender()
        log.clear()
        ours.fire(other)
        assert log == []
        reused = reused or id(other) == dead_id
        del other
        if reused:
            break
    assert reused, "no address was reused: the case was not exercised"


def test_declared_arguments_reach_receivers_by_name() -> None:
    """A signal that declares its arguments fires with exactly those: each reaches a plain
    or a bound receiver by name, and a fire that leaves one out or adds another is refused
    before any receiver runs."""
    ours = Signal("ours", arguments=("scope", "count"))
    sender = Sender()
    got: list[tuple[str, object, object]] = []

    def plain(sender: object, *, scope: str, count: int) -> None:
        got.append(("plain", scope, count))

    class Bound:
        def receive(self, sender: object, *, scope: str, **rest: object) -> None:
            got.append(("bound", scope, rest))

    ours.connect(plain)
    ours.fire(sender, scope="ip:a", count=2)
    assert got == [("plain", "ip:a", 2)]
    ours.disconnect(plain)
    bound = Bound()
    ours.connect(bound.receive)
    got.clear()
    ours.fire(sender, count=3, scope="ip:b")
    ours.fire(sender, scope="ip:c", count=4)  # the cached path, not only the first send
    assert got == [("bound", "ip:b", {"count": 3}), ("bound", "ip:c", {"count": 4})]
    got.clear()
    with pytest.raises(TypeError):
        ours.fire(sender, scope="ip:d")
    with pytest.raises(TypeError):
        ours.fire(sender, scope="ip:d", count=1, extra=True)
    assert got == []
    assert ours.arguments == ("scope", "count")


@pytest.mark.parametrize(
    "arguments", [("not valid",), ("class",), ("_private",), ("sender",), ("a", "a")]
)
def test_argument_names_that_cannot_be_declared(arguments: tuple[str, ...]) -> None:
    """Names that are not identifiers, keywords, the sender's own name, ones that would
    clash with the compiled ``fire``'s internals, and repeats are refused at once."""
    with pytest.raises(ValueError, match="argument"):
        Signal("ours", arguments=arguments)


def test_every_package_signal_declares_the_arguments_it_documents() -> None:
    """The package's signals fire on the compiled path: each declares its arguments, and
    they are the ones the table in ``mcp_cancellation.signals`` documents for it."""
    doc = signals.__doc__ or ""
    rows = re.split(r"^(?=``[a-z_.]+``)", doc.split("keyword arguments", 1)[1], flags=re.M)
    documented = {row.split("``")[1]: row for row in rows if row.startswith("``")}
    package = [getattr(signals, name) for name in signals.__all__ if name != "namespace"]
    assert sorted(documented) == sorted(signal.name for signal in package)
    for signal in package:
        assert signal.arguments, signal.name
        named = set(re.findall(r"``([a-z_]+)``", documented[signal.name]))
        assert set(signal.arguments) <= named, signal.name


@pytest.mark.parametrize("arguments", [(), ("id", "entry", "target", "calls", "function")])
def test_any_declared_names_arrive_unchanged(arguments: tuple[str, ...]) -> None:
    """No arguments at all, or names that a hand-written ``fire`` would use for its own
    variables (or that shadow a builtin it calls): each arrives with the value given, on
    the first (uncached) fire and on the cached ones."""
    ours = Signal("ours", arguments=arguments)
    sender = Sender()
    got: list[dict[str, object]] = []

    def receiver(sender: object, **kwargs: object) -> None:
        got.append(kwargs)

    ours.connect(receiver)
    given = {name: f"value of {name}" for name in arguments}
    for _ in range(3):
        ours.fire(sender, **given)
    assert got == [given] * 3
