"""Caller scopes from ASGI scopes: session > principal > ip; proxies only when trusted."""

from __future__ import annotations

from typing import Any

import pytest
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from starlette.authentication import SimpleUser, UnauthenticatedUser

from mcp_cancellation import client_bucket, scope_of
from mcp_cancellation.scope import (
    PRINCIPAL_KEY,
    SESSION_KEY,
    client_address,
    principal_of,
    scope_kind,
)


def http(
    client: str | None = "192.0.2.10",
    headers: list[tuple[bytes, bytes]] | None = None,
    /,
    **extra: Any,
) -> dict[str, Any]:
    scope: dict[str, Any] = {
        "type": "http",
        "method": "POST",
        "path": "/mcp",
        "headers": headers or [],
        "client": None if client is None else (client, 51_000),
        **extra,
    }
    return scope


def user(client_id: str, **token: Any) -> AuthenticatedUser:
    return AuthenticatedUser(
        AccessToken(token="secret-bearer", client_id=client_id, scopes=["mcp"], **token)
    )


# -- client_bucket ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "bucket"),
    [
        ("192.0.2.7", "192.0.2.7"),
        ("10.0.0.1", "10.0.0.1"),
        ("::ffff:192.0.2.7", "192.0.2.7"),  # IPv4-mapped IPv6 is its IPv4 form
        ("::FFFF:198.51.100.1", "198.51.100.1"),
        ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::/64"),
        ("2001:db8::1", "2001:db8::/64"),
        ("::1", "::/64"),
        ("fe80::1%eth0", "fe80::/64"),
        ("[2001:db8:1:2::9]:443", "2001:db8:1:2::/64"),
        ("192.0.2.7:8080", "192.0.2.7"),
        ("", "unknown"),
        (None, "unknown"),
        ("not an address", "unknown"),
        ("999.1.1.1", "unknown"),
        ("192.0.2", "unknown"),
        ("unix:/run/socket", "unknown"),
        ("2001:db8:::1", "unknown"),
    ],
)
def test_client_bucket(address: str | None, bucket: str) -> None:
    assert client_bucket(address) == bucket


def test_addresses_in_one_ipv6_64_share_a_bucket_and_others_do_not() -> None:
    assert client_bucket("2001:db8:a:b::1") == client_bucket("2001:db8:a:b:ffff::2")
    assert client_bucket("2001:db8:a:b::1") != client_bucket("2001:db8:a:c::1")
    assert client_bucket("192.0.2.1") != client_bucket("192.0.2.2")


# -- scope_of: what is and is not a request ---------------------------------------------


@pytest.mark.parametrize(
    "asgi", [None, {"type": "lifespan"}, {}, {"type": "something-else", "client": ("1.2.3.4", 1)}]
)
def test_non_requests_are_global(asgi: dict[str, Any] | None) -> None:
    assert scope_of(asgi) == "global"


def test_websocket_is_a_request() -> None:
    assert scope_of({"type": "websocket", "client": ("192.0.2.3", 1)}) == "ip:192.0.2.3"


@pytest.mark.parametrize(
    ("client", "scope"),
    [
        ("192.0.2.10", "ip:192.0.2.10"),
        ("::ffff:192.0.2.10", "ip:192.0.2.10"),
        ("2001:db8:5:6:7:8:9:a", "ip:2001:db8:5:6::/64"),
        ("garbage", "ip:unknown"),
        (None, "ip:unknown"),
    ],
)
def test_anonymous_requests_are_scoped_by_ip(client: str | None, scope: str) -> None:
    assert scope_of(http(client)) == scope


# -- sessions ---------------------------------------------------------------------------


def test_a_validated_session_id_wins() -> None:
    asgi = http(**{SESSION_KEY: "abc123", PRINCIPAL_KEY: "alice"}, user=user("app"))
    assert scope_of(asgi) == "session:abc123"


def test_a_raw_session_header_is_ignored() -> None:
    # Any client can send Mcp-Session-Id: only a server-validated value counts.
    asgi = http("192.0.2.10", [(b"mcp-session-id", b"victim-session")])
    assert scope_of(asgi) == "ip:192.0.2.10"
    asgi = http("192.0.2.10", [(b"Mcp-Session-Id", b"victim-session")], user=user("app"))
    assert scope_of(asgi) == "principal:app"


@pytest.mark.parametrize("bad", ["", None, 42, b"abc", ["abc"]])
def test_an_empty_or_non_string_session_is_ignored(bad: object) -> None:
    assert scope_of(http(**{SESSION_KEY: bad})) == "ip:192.0.2.10"


# -- principals -------------------------------------------------------------------------


def test_principal_from_the_sdk_authenticated_user() -> None:
    asgi = http(user=user("client-123"))
    assert principal_of(asgi) == "client-123"
    assert scope_of(asgi) == "principal:client-123"


def test_principal_includes_issuer_and_subject_when_known() -> None:
    asgi = http(user=user("app", subject="alice", claims={"iss": "https://idp.example"}))
    assert scope_of(asgi) == "principal:app|https://idp.example|alice"
    other = http(user=user("app", subject="bob", claims={"iss": "https://idp.example"}))
    assert scope_of(other) != scope_of(asgi)
    only_subject = http(user=user("app", subject="alice"))
    assert scope_of(only_subject) == "principal:app||alice"


def test_an_explicit_principal_wins_over_the_user() -> None:
    asgi = http(user=user("client-123"), **{PRINCIPAL_KEY: "tenant-7"})
    assert scope_of(asgi) == "principal:tenant-7"


@pytest.mark.parametrize("bad", ["", None, 7, b"alice"])
def test_an_empty_or_non_string_principal_key_is_ignored(bad: object) -> None:
    assert scope_of(http(**{PRINCIPAL_KEY: bad})) == "ip:192.0.2.10"


def test_an_unauthenticated_user_is_no_principal() -> None:
    assert scope_of(http(user=UnauthenticatedUser())) == "ip:192.0.2.10"


def test_a_starlette_user_without_a_token_uses_its_username() -> None:
    assert scope_of(http(user=SimpleUser("carol"))) == "principal:carol"


def test_two_principals_behind_one_ip() -> None:
    alice = scope_of(http("192.0.2.1", user=user("alice")))
    bob = scope_of(http("192.0.2.1", user=user("bob")))
    nobody = scope_of(http("192.0.2.1"))
    assert len({alice, bob, nobody}) == 3


def test_a_principal_named_like_an_ip_differs_from_that_ip() -> None:
    assert scope_of(http("203.0.113.5", **{PRINCIPAL_KEY: "192.0.2.1"})) == "principal:192.0.2.1"
    assert scope_of(http("192.0.2.1")) == "ip:192.0.2.1"


# -- proxies ----------------------------------------------------------------------------

PROXIES = ("10.0.0.0/8", "2001:db8:ffff::1")


Headers = list[tuple[bytes, bytes]]


def xff(*values: str) -> Headers:
    return [(b"x-forwarded-for", value.encode()) for value in values]


def forwarded(*values: str) -> Headers:
    return [(b"forwarded", value.encode()) for value in values]


#: Each forwarding header, claiming the client 198.51.100.7.
CLAIMS = [
    pytest.param(xff("198.51.100.7"), id="x-forwarded-for"),
    pytest.param(forwarded("for=198.51.100.7"), id="forwarded"),
]


@pytest.mark.parametrize("claim", CLAIMS)
def test_forwarded_headers_are_ignored_without_trusted_proxies(claim: Headers) -> None:
    assert scope_of(http("10.0.0.1", claim)) == "ip:10.0.0.1"


@pytest.mark.parametrize("claim", CLAIMS)
def test_forwarded_headers_are_ignored_from_an_untrusted_peer(claim: Headers) -> None:
    assert scope_of(http("192.0.2.66", claim), trusted_proxies=PROXIES) == "ip:192.0.2.66"


def test_x_forwarded_for_from_a_trusted_proxy() -> None:
    asgi = http("10.0.0.1", xff("198.51.100.7"))
    assert scope_of(asgi, trusted_proxies=PROXIES) == "ip:198.51.100.7"


def test_x_forwarded_for_is_read_right_to_left_skipping_trusted_hops() -> None:
    # The client wrote "6.6.6.6" itself; the first untrusted address from the right is
    # the one our outermost proxy saw.
    asgi = http("10.0.0.1", xff("6.6.6.6, 198.51.100.7, 10.1.2.3", "10.4.5.6"))
    assert client_address(asgi, PROXIES) == "198.51.100.7"
    assert scope_of(asgi, trusted_proxies=PROXIES) == "ip:198.51.100.7"


def test_a_spoofed_leftmost_entry_is_not_believed() -> None:
    asgi = http("10.0.0.1", xff("10.9.9.9, 203.0.113.8"))
    assert scope_of(asgi, trusted_proxies=PROXIES) == "ip:203.0.113.8"


def test_forwarded_header_from_a_trusted_proxy() -> None:
    asgi = http(
        "10.0.0.1",
        forwarded('for=6.6.6.6, for="[2001:db8:7:8::1]:4711";proto=https', "for=10.2.2.2"),
    )
    assert scope_of(asgi, trusted_proxies=PROXIES) == "ip:2001:db8:7:8::/64"


def test_forwarded_wins_over_x_forwarded_for() -> None:
    headers = forwarded("for=198.51.100.1") + xff("198.51.100.2")
    assert scope_of(http("10.0.0.1", headers), trusted_proxies=PROXIES) == "ip:198.51.100.1"


def test_a_trusted_ipv6_proxy_and_a_mapped_client() -> None:
    asgi = http("2001:db8:ffff::1", xff("::ffff:198.51.100.9"))
    assert scope_of(asgi, trusted_proxies=PROXIES) == "ip:198.51.100.9"


@pytest.mark.parametrize(
    "claim",
    [
        pytest.param(xff("not-an-ip"), id="x-forwarded-for"),
        pytest.param(forwarded("for=_hidden"), id="forwarded"),
    ],
)
def test_a_malformed_forwarded_address_is_unknown(claim: Headers) -> None:
    assert scope_of(http("10.0.0.1", claim), trusted_proxies=PROXIES) == "ip:unknown"


def test_a_trusted_proxy_without_forwarding_headers_is_the_client() -> None:
    # Nothing says who is behind the proxy: the peer is the best answer, not "unknown".
    assert scope_of(http("10.0.0.1"), trusted_proxies=PROXIES) == "ip:10.0.0.1"


def test_proxy_headers_never_override_a_principal_or_session() -> None:
    asgi = http("10.0.0.1", xff("198.51.100.7"), user=user("app"))
    assert scope_of(asgi, trusted_proxies=PROXIES) == "principal:app"


# -- scope_kind -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scope", "kind"),
    [
        ("session:abc", "session"),
        ("principal:app", "principal"),
        ("ip:192.0.2.1", "ip"),
        ("ip:unknown", "ip"),
        ("global", "global"),
        ("tenant:7", "other"),
        ("", "other"),
        ("globalx", "other"),
        ("ip", "other"),  # a kind's name without its colon
        ("principal:", "principal"),
        (":ip", "other"),
        ("ipx:1", "other"),
        ("ip:a:b", "ip"),  # the first colon decides
        ("session", "other"),
    ],
)
def test_scope_kind(scope: str, kind: str) -> None:
    assert scope_kind(scope) == kind
