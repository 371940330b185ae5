"""The package's signals deliver to exactly whom plain blinker would, although their
``send`` caches its receivers: after connects and disconnects, per sender, when a weakly
connected receiver dies, while muted, and for async receivers."""

from __future__ import annotations

import gc
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
