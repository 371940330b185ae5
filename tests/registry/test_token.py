"""A request's token: tool code reads it, the registry and the storages flip it once."""

from __future__ import annotations

import pytest

from mcp_cancellation import RequestCancelled, RequestToken
from mcp_cancellation.storage._in_flight import InFlightTokens


def test_a_new_token_is_active_and_names_its_request() -> None:
    token = RequestToken("1", "ip:192.0.2.1", "echo")
    assert (token.request_id, token.scope, token.tool) == ("1", "ip:192.0.2.1", "echo")
    assert not token.cancelled
    assert token.reason is None
    assert token.cancelled_at is None
    token.raise_if_cancelled()  # does nothing
    assert not token.observed


def test_it_flips_once_and_keeps_the_first_reason() -> None:
    token = RequestToken("1", "global")
    token._cancel("first")
    token._cancel("second")
    assert token.cancelled
    assert token.reason == "first"
    assert token.cancelled_at is not None
    with pytest.raises(RequestCancelled, match="first"):
        token.raise_if_cancelled()
    assert token.observed
    token.set_outcome("killed")
    assert token.outcome == "killed"
    with pytest.raises(ValueError, match="outcome"):
        token.set_outcome("vanished")  # type: ignore[arg-type]


def test_one_owner_is_a_pair_and_more_owners_share_the_request() -> None:
    table = InFlightTokens()
    a, b = RequestToken("1", "s"), RequestToken("1", "s")
    table.add("s", "1", "owner-a", a)
    assert table.count("s", "1") == 1
    assert table.holds("s", "1", "owner-a")
    table.add("s", "1", "owner-b", b)
    assert table.count("s", "1") == 2
    assert table.tokens("s", "1") == [a, b]
    assert table.owners("s", "1") == [("owner-a", a), ("owner-b", b)]
    assert not table.discard("s", "1", "owner-c")
    assert table.discard("s", "1", "owner-a")
    assert table.tokens("s", "1") == [b]
    assert not table.holds("s", "1", "owner-a")
    table.add("s", "1", "owner-b", a)  # tracking again under the same owner replaces
    assert table.tokens("s", "1") == [a]
    assert table.sweep({"owner-b"}) == [("s", "1", "owner-b")]
    assert len(table) == 0
    assert table.count("s", "1") == 0
