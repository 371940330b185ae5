"""A token is sealed: tool code reads it, only the registry flips it."""

from __future__ import annotations

import pytest

from mcp_cancellation import RequestCancelled, RequestToken
from mcp_cancellation.storage._in_flight import InFlightTokens


def test_every_attribute_is_read_only() -> None:
    token = RequestToken("1", "ip:192.0.2.1", "echo")
    for name in ("cancelled", "request_id", "scope", "tool", "_reason", "anything"):
        with pytest.raises(AttributeError, match="read-only"):
            setattr(token, name, True)
        with pytest.raises(AttributeError, match="read-only"):
            delattr(token, name)
    assert (token.request_id, token.scope, token.tool) == ("1", "ip:192.0.2.1", "echo")
    assert type(token) is RequestToken
    assert not token.cancelled


def test_its_own_methods_still_write_it() -> None:
    token = RequestToken("1", "global")
    token.set_cancelled("first")
    token.set_cancelled("second")  # idempotent: the first reason stays
    assert token.cancelled
    assert token.reason == "first"
    assert token.cancelled_at is not None
    with pytest.raises(RequestCancelled, match="first"):
        token.raise_if_cancelled()
    assert token.observed
    token.set_outcome("killed")
    assert token.outcome == "killed"


def test_one_owner_is_a_pair_and_more_owners_share_the_request() -> None:
    table = InFlightTokens()
    a, b = RequestToken("1", "s"), RequestToken("1", "s")
    table.add("s", "1", "owner-a", a)
    assert table.count("s", "1") == 1
    assert table.holds("s", "1", "owner-a")
    table.add("s", "1", "owner-b", b)
    assert table.count("s", "1") == 2
    assert table.tokens("s", "1") == [a, b]
    assert table.tokens("s", "1", only={"owner-b"}) == [b]
    assert not table.discard("s", "1", "owner-c")
    assert table.discard("s", "1", "owner-a")
    assert table.tokens("s", "1") == [b]
    assert not table.holds("s", "1", "owner-a")
    table.add("s", "1", "owner-b", a)  # tracking again under the same owner replaces
    assert table.tokens("s", "1") == [a]
    assert table.sweep({"owner-b"}) == [("s", "1", "owner-b")]
    assert len(table) == 0
    assert table.count("s", "1") == 0


def test_a_subclass_keeps_its_class_and_the_seal() -> None:
    class Tagged(RequestToken):
        __slots__ = ()

    token = Tagged("1", "global")
    assert type(token) is Tagged
    with pytest.raises(AttributeError, match="read-only"):
        token.tool = "x"
