"""Client address (trusted proxies, headers, grouping) and the identities of each key kind."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest
from django.test import RequestFactory, override_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_ratelimits import identity as identity_module
from django_ratelimits.engine import Identity
from django_ratelimits.identity import (
    MAX_ENTRIES,
    MAX_HEADER_CHARS,
    UNKNOWN,
    client_ip,
    identities,
    key_function,
    parse_address,
)
from django_ratelimits.policies.spec import KeyKind, PolicySpec
from django_ratelimits.rates import parse_rates

PROXIES = ["10.0.0.0/8", "2001:db8:ffff::/48"]
PEER = "10.0.0.1"  # a trusted proxy when PROXIES are configured

factory = RequestFactory()


@contextmanager
def configured(**values: Any) -> Iterator[None]:
    with override_settings(DJANGO_RATELIMITS={key.upper(): v for key, v in values.items()}):
        yield


def request(remote: object = PEER, **headers: str) -> HttpRequest:
    """A GET request from ``remote``; ``x_forwarded_for="..."`` sets X-Forwarded-For."""
    req = factory.get("/")
    if remote is None:
        del req.META["REMOTE_ADDR"]
    else:
        req.META["REMOTE_ADDR"] = remote
    for name, value in headers.items():
        req.META["HTTP_" + name.upper()] = value
    return req


def ip_via(remote: object = PEER, **headers: str) -> str:
    """``client_ip`` with PROXIES trusted."""
    with configured(trusted_proxies=PROXIES):
        return client_ip(request(remote, **headers))


# --------------------------------------------------------------------------- no proxies


def test_peer_is_the_client_without_trusted_proxies() -> None:
    assert client_ip(request("203.0.113.7")) == "203.0.113.7"


@pytest.mark.parametrize("header", ["x_forwarded_for", "forwarded", "x_real_ip"])
def test_headers_are_ignored_without_trusted_proxies(header: str) -> None:
    value = "for=1.2.3.4" if header == "forwarded" else "1.2.3.4"
    with configured(client_ip_header=header.replace("_", "-")):
        assert client_ip(request("203.0.113.7", **{header: value})) == "203.0.113.7"


def test_untrusted_peer_cannot_spoof() -> None:
    assert ip_via("203.0.113.7", x_forwarded_for="1.2.3.4") == "203.0.113.7"


def test_untrusted_peer_cannot_spoof_with_a_trusted_address() -> None:
    assert ip_via("203.0.113.7", x_forwarded_for="10.0.0.5") == "203.0.113.7"


# --------------------------------------------------------------------------- X-Forwarded-For


def test_trusted_peer_names_the_client() -> None:
    assert ip_via(x_forwarded_for="1.2.3.4") == "1.2.3.4"


def test_trusted_peer_without_the_header_is_the_client() -> None:
    assert ip_via() == PEER


def test_chain_through_trusted_proxies() -> None:
    assert ip_via(x_forwarded_for="1.2.3.4, 10.0.0.2, 10.0.0.3") == "1.2.3.4"


def test_entries_left_of_the_real_client_are_ignored() -> None:
    # The client sent "X-Forwarded-For: 6.6.6.6"; the proxy appended its peer.
    assert ip_via(x_forwarded_for="6.6.6.6, 1.2.3.4") == "1.2.3.4"
    assert ip_via(x_forwarded_for="6.6.6.6, 1.2.3.4, 10.0.0.2") == "1.2.3.4"


def test_forged_trusted_addresses_left_of_the_client_are_ignored() -> None:
    assert ip_via(x_forwarded_for="10.9.9.9, 1.2.3.4, 10.0.0.2") == "1.2.3.4"


def test_all_entries_trusted_gives_the_left_most() -> None:
    assert ip_via(x_forwarded_for="10.0.0.3, 10.0.0.2") == "10.0.0.3"


def test_several_header_lines_joined() -> None:
    # WSGI servers join repeated header lines with ", ", Django's ASGI handler with ",".
    assert ip_via(x_forwarded_for="6.6.6.6,1.2.3.4,10.0.0.2") == "1.2.3.4"


@pytest.mark.parametrize(
    ("chain", "expected"),
    [
        ("1.2.3.4, garbage, 10.0.0.2", "10.0.0.2"),  # never left of the garbage
        ("1.2.3.4, , 10.0.0.2", "10.0.0.2"),  # an empty entry is garbage too
        ("1.2.3.4, 10.0.0.2, garbage", PEER),  # garbage right-most: the peer
        ("garbage", PEER),
        ("", PEER),
        ("garbage, 1.2.3.4", "1.2.3.4"),  # garbage left of the client: irrelevant
        ("5.6.7.8, 999.1.1.1, 1.2.3.4", "1.2.3.4"),
        ("1.2.3.4, 10.0.0.2%eth0, 10.0.0.3", "10.0.0.3"),  # a zone on IPv4 is garbage
    ],
)
def test_garbage_stops_the_walk(chain: str, expected: str) -> None:
    assert ip_via(x_forwarded_for=chain) == expected


def test_only_the_last_entries_are_read() -> None:
    proxies = ", ".join(f"10.0.{i // 250}.{i % 250 + 1}" for i in range(2 * MAX_ENTRIES))
    result = ip_via(x_forwarded_for=f"1.2.3.4, {proxies}")
    # The chain is cut: its left-most entry read is the answer, never the cut-off client.
    assert result == "10.0.0.101"
    assert ipaddress.ip_address(result) in ipaddress.ip_network("10.0.0.0/8")


def test_an_entry_cut_by_the_length_bound_is_not_read() -> None:
    # "21.2.3.4" is cut to "1.2.3.4" by the length bound: that must not become the client.
    middle = "10.0.0.9" + " " * 200 + ","
    head, tail = "21.2.3.4,", "10.0.0.8"
    count = (MAX_HEADER_CHARS - len(head) - len(tail)) // len(middle)
    chain = head + middle * count + tail
    chain = chain[: -len(tail)] + " " * (MAX_HEADER_CHARS + 1 - len(chain)) + tail
    assert len(chain) == MAX_HEADER_CHARS + 1
    assert ip_via(x_forwarded_for=chain) == "10.0.0.9"


# --------------------------------------------------------------------------- Forwarded


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("for=1.2.3.4", "1.2.3.4"),
        ("For=1.2.3.4", "1.2.3.4"),
        ('for="1.2.3.4"', "1.2.3.4"),
        ('for="1.2.3.4:4711"', "1.2.3.4"),
        ('for="[2001:db8:cafe::17]:4711"', "2001:db8:cafe::/64"),
        ('for="[2001:db8:cafe::17]"', "2001:db8:cafe::/64"),
        ('for="[2001:db8:cafe::17]:_port"', "2001:db8:cafe::/64"),
        ("for=1.2.3.4;proto=https;by=10.0.0.1", "1.2.3.4"),
        ("proto=https; for=1.2.3.4 ;host=example.com", "1.2.3.4"),
        ("for=6.6.6.6, for=1.2.3.4", "1.2.3.4"),
        ("for=1.2.3.4, for=10.0.0.2;proto=http", "1.2.3.4"),
        ('for=1.2.3.4, for="[2001:db8:ffff::2]"', "1.2.3.4"),  # a trusted IPv6 proxy
        ("for=1.2.3.4, for=unknown", PEER),
        ("for=1.2.3.4, for=_hidden", PEER),
        ("for=1.2.3.4, for=10.0.0.2, for=_hidden, for=10.0.0.3", "10.0.0.3"),
        ("for=1.2.3.4, proto=https", PEER),  # an element without for
        ("for=1.2.3.4;for=5.6.7.8", PEER),  # two for in one element
        ('for="1.2.3.4, for=5.6.7.8', "5.6.7.8"),  # an unbalanced quote stays on its side
        ('for="\\"1.2.3.4\\""', PEER),
        ("", PEER),
        (', for="1.2.3.4"', "1.2.3.4"),  # the nginx line in the docs, no client header
        ('for="2001:db8:cafe::17"', "2001:db8:cafe::/64"),  # IPv6 without brackets
    ],
)
def test_forwarded(value: str, expected: str) -> None:
    with configured(trusted_proxies=PROXIES, client_ip_header="Forwarded"):
        assert client_ip(request(forwarded=value)) == expected


def test_forwarded_is_not_read_when_x_forwarded_for_is_configured() -> None:
    assert ip_via(forwarded="for=1.2.3.4") == PEER


# --------------------------------------------------------------------------- single address


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1.2.3.4", "1.2.3.4"),
        (" 1.2.3.4 ", "1.2.3.4"),
        ("2001:db8:1:2::7", "2001:db8:1:2::/64"),
        ("10.0.0.9", "10.0.0.9"),  # a single-address header is taken as is
        ("6.6.6.6, 1.2.3.4", PEER),  # two lines joined: not one address
        ("garbage", PEER),
        ("", PEER),
    ],
)
def test_x_real_ip(value: str, expected: str) -> None:
    with configured(trusted_proxies=PROXIES, client_ip_header="X-Real-IP"):
        assert client_ip(request(x_real_ip=value)) == expected
        assert client_ip(request("203.0.113.7", x_real_ip=value)) == "203.0.113.7"


# --------------------------------------------------------------------------- normalising


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1.2.3.4", "1.2.3.4"),
        (" \t1.2.3.4 ", "1.2.3.4"),
        ("1.2.3.4:80", "1.2.3.4"),
        ("[::1]:80", "::1"),
        ("[::1]", "::1"),
        ("[2001:db8::1]:_x", "2001:db8::1"),
        ("fe80::1%eth0", "fe80::1"),
        ("[fe80::1%25eth0]:443", "fe80::1"),
        ("::ffff:1.2.3.4", "1.2.3.4"),
        ("[::ffff:1.2.3.4]:80", "1.2.3.4"),
        ("2001:DB8::1", "2001:db8::1"),
        ("1.2.3.4:", None),
        ("1.2.3.4:65536", None),
        ("1.2.3.4:x", None),
        ("[::1", None),
        ("[::1]x", None),
        ("[1.2.3.4]:80", "1.2.3.4"),
        ("1.2.3.4%eth0", None),
        ("01.2.3.4", None),
        ("1.2.3", None),
        ("\u0661.\u0662.\u0663.\u0664", None),  # Arabic-Indic digits
        ("1.2.3.4\x00", None),
        ("unknown", None),
        ("_hidden", None),
        ("", None),
        ("1" * 1000, None),
        (None, None),
        (16909060, None),
    ],
)
def test_parse_address(text: object, expected: str | None) -> None:
    address = parse_address(text)
    assert (None if address is None else str(address)) == expected


def test_ports_zones_and_mapped_addresses_in_a_chain() -> None:
    assert ip_via(x_forwarded_for="[::ffff:1.2.3.4]:5555, 10.0.0.2:80") == "1.2.3.4"
    assert ip_via(x_forwarded_for="fe80::1%eth0") == "fe80::/64"


def test_ipv4_mapped_peer_is_ipv4() -> None:
    assert client_ip(request("::ffff:203.0.113.7")) == "203.0.113.7"
    # ... and a mapped proxy address is trusted by its IPv4 network.
    assert ip_via("::ffff:10.0.0.1", x_forwarded_for="1.2.3.4") == "1.2.3.4"


@pytest.mark.parametrize("listed", ["::ffff:10.0.0.1", "::ffff:10.0.0.0/104"])
@pytest.mark.parametrize("peer", ["::ffff:10.0.0.1", "10.0.0.1"])
def test_an_ipv4_mapped_trusted_proxy_is_trusted(listed: str, peer: str) -> None:
    # TRUSTED_PROXIES copied from the log of a server bound to [::], the peer shown
    # either way: the header is read, the proxy is not counted as the client.
    with configured(trusted_proxies=[listed]):
        assert client_ip(request(peer, x_forwarded_for="203.0.113.7")) == "203.0.113.7"


def test_peer_with_a_port() -> None:
    assert client_ip(request("203.0.113.7:5000")) == "203.0.113.7"


@pytest.mark.parametrize("remote", [None, "", "garbage", "   ", "1.2.3.4, 5.6.7.8", 42, b"1.2.3.4"])
def test_missing_or_garbage_remote_addr(remote: object) -> None:
    assert client_ip(request(remote)) == UNKNOWN
    assert ip_via(remote, x_forwarded_for="1.2.3.4") == UNKNOWN  # cannot tell if trusted


# --------------------------------------------------------------------------- grouping


def test_ipv6_grouped_by_64_by_default() -> None:
    one = client_ip(request("2001:db8:1:2::7"))
    assert one == "2001:db8:1:2::/64"
    assert client_ip(request("2001:db8:1:2:ffff:1:2:3")) == one
    assert client_ip(request("2001:db8:1:3::7")) != one


@pytest.mark.parametrize(
    ("prefix", "remote", "expected"),
    [
        (48, "2001:db8:1:2::7", "2001:db8:1::/48"),
        (56, "2001:db8:1:2ff::7", "2001:db8:1:200::/56"),
        (128, "2001:db8:1:2::7", "2001:db8:1:2::7/128"),
        (16, "2001:db8:1:2::7", "2001::/16"),
    ],
)
def test_ipv6_prefix_setting(prefix: int, remote: str, expected: str) -> None:
    with configured(ipv6_prefix=prefix):
        assert client_ip(request(remote)) == expected


@pytest.mark.parametrize(
    ("prefix", "expected"),
    [(32, "203.0.113.7"), (24, "203.0.113.0/24"), (16, "203.0.0.0/16"), (8, "203.0.0.0/8")],
)
def test_ipv4_prefix_setting(prefix: int, expected: str) -> None:
    with configured(ipv4_prefix=prefix):
        assert client_ip(request("203.0.113.7")) == expected


def test_grouping_applies_to_the_client_from_the_header() -> None:
    with configured(trusted_proxies=PROXIES, ipv4_prefix=24):
        assert client_ip(request(x_forwarded_for="1.2.3.4")) == "1.2.3.0/24"
        assert client_ip(request(x_forwarded_for="2001:db8:1:2::7")) == "2001:db8:1:2::/64"


def test_ipv6_trusted_proxy() -> None:
    assert ip_via("2001:db8:ffff::1", x_forwarded_for="1.2.3.4") == "1.2.3.4"
    assert ip_via("2001:db8:fffe::1", x_forwarded_for="1.2.3.4") == "2001:db8:fffe::/64"


def test_settings_are_read_on_every_call() -> None:
    req = request(x_forwarded_for="1.2.3.4")
    assert client_ip(req) == PEER
    with configured(trusted_proxies=PROXIES):
        assert client_ip(req) == "1.2.3.4"
    assert client_ip(req) == PEER


def test_a_peer_seen_before_is_worked_out_again_under_new_settings() -> None:
    # What a peer gives is kept for its next requests: a change of settings (a prefix,
    # a trusted proxy, hashing) must still apply to the next request from it.
    assert client_ip(request("203.0.113.7")) == "203.0.113.7"
    with configured(ipv4_prefix=24):
        assert client_ip(request("203.0.113.7")) == "203.0.113.0/24"
    with configured(hash_ips=True):
        counted = identity_module.ip_identity(request("203.0.113.7")).value
        assert counted.startswith(identity_module.HASHED)
    assert identity_module.ip_identity(request("203.0.113.7")).value == "203.0.113.7"
    assert client_ip(request(x_forwarded_for="1.2.3.4")) == PEER
    with configured(trusted_proxies=PROXIES):
        assert client_ip(request(x_forwarded_for="1.2.3.4")) == "1.2.3.4"
        # Behind a trusted proxy each request names its own client: never the last one's.
        assert client_ip(request(x_forwarded_for="5.6.7.8")) == "5.6.7.8"


def test_rotating_peers_cannot_grow_what_is_kept_of_them() -> None:
    # An IPv6 client can send from a new address on every request.
    for n in range(identity_module._PEERS_KEPT + 100):
        network = ipaddress.ip_network(f"2001:db8:{n:x}::/64").compressed
        assert client_ip(request(f"2001:db8:{n:x}::1")) == network
    assert len(identity_module._by_peer) <= identity_module._PEERS_KEPT
    # A REMOTE_ADDR too long to be an address is never kept.
    assert client_ip(request("1" * 500)) == UNKNOWN
    assert "1" * 500 not in identity_module._by_peer


# --------------------------------------------------------------------------- hostile input


def test_huge_header_is_cheap(monkeypatch: pytest.MonkeyPatch) -> None:
    # Cheap at any machine speed: a 1.8 MB chain of trusted proxies, which the walk
    # would follow to its left end, costs at most MAX_ENTRIES address parses.
    parsed: list[object] = []
    real = identity_module.parse_address

    def counting(text: object) -> Any:
        parsed.append(text)
        return real(text)

    monkeypatch.setattr(identity_module, "parse_address", counting)
    chain = "1.2.3.4, " + "10.0.0.3, " * 200_000 + "10.0.0.2"
    assert ip_via(x_forwarded_for=chain) == "10.0.0.3"  # the left-most entry it read
    assert len(parsed) <= identity_module.MAX_ENTRIES + 1  # the peer, then the entries
    assert ip_via(x_forwarded_for="1.2.3.4, " * 200_000 + "10.0.0.2") == "1.2.3.4"


def _candidates(text: str) -> set[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """Every address written anywhere in ``text``, found without the module's parser."""
    found = set()
    pieces = re.findall(r"[0-9A-Fa-f:.]+", text) + re.findall(r"\d+\.\d+\.\d+\.\d+", text)
    for piece in pieces:
        for option in (piece, piece.rpartition(":")[0]):
            try:
                address = ipaddress.ip_address(option)
            except ValueError:
                continue
            if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
                address = address.ipv4_mapped
            found.add(address)
    return found


_addresses = st.one_of(
    st.ip_addresses().map(str),
    st.ip_addresses(network="10.0.0.0/8").map(str),
    st.ip_addresses(v=6).map(lambda a: f"[{a}]:{443}"),
    st.ip_addresses(v=4).map(lambda a: f"{a}:8080"),
    st.ip_addresses(v=4).map(lambda a: f"::ffff:{a}"),
    st.ip_addresses(v=6).map(lambda a: f"{a}%eth0"),
)
_junk = st.one_of(
    st.text(max_size=30),
    st.text(st.characters(max_codepoint=255), max_size=30),  # latin-1 decoded bytes
    st.sampled_from(["", " ", "\x00", "unknown", "_hidden", "[", "]", '"', ";", "=", "%"]),
)
_entries = st.lists(st.one_of(_addresses, _junk), max_size=30)


@st.composite
def _header(draw: st.DrawFn, forwarded: bool) -> str:
    entries = draw(_entries)
    if forwarded:
        entries = [
            draw(st.sampled_from(["for={}", 'for="{}"', "{}", "for={};proto=http"])).format(e)
            for e in entries
        ]
    text = draw(st.sampled_from([",", ", ", " ,"])).join(entries)
    if draw(st.booleans()):
        text = (
            draw(st.sampled_from(["x", "1.2.3.4, ", "\x00"])) * draw(st.integers(0, 70_000)) + text
        )
    return text


@pytest.mark.parametrize("header", ["X-Forwarded-For", "Forwarded", "X-Real-IP"])
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_header_gives_the_peer_or_an_address_from_it(header: str, data: st.DataObject) -> None:
    value = data.draw(_header(forwarded=header == "Forwarded"))
    peer = data.draw(st.sampled_from([PEER, "2001:db8:ffff::1", "203.0.113.7"]))
    meta = "HTTP_" + header.upper().replace("-", "_")
    req = request(peer)
    req.META[meta] = value
    with configured(trusted_proxies=PROXIES, client_ip_header=header):
        result = client_ip(req)
    assert isinstance(result, str)
    assert len(result) < 64
    with configured():
        peer_group = client_ip(request(peer))
    if result != peer_group:
        assert peer != "203.0.113.7"  # an untrusted peer is always the client
        network = ipaddress.ip_network(result)
        assert any(address in network for address in _candidates(value))


# --------------------------------------------------------------------------- identities


def spec(key: KeyKind, key_arg: str = "") -> PolicySpec:
    return PolicySpec(name="p", rates=parse_rates("10/m"), key=key, key_arg=key_arg)


def with_user(req: HttpRequest, user: User | AnonymousUser) -> HttpRequest:
    req.user = user
    return req


IP = Identity("ip", "203.0.113.7")


@pytest.fixture
def user(db: None) -> User:
    return User.objects.create_user("alice", password="x")


def test_ip_kind() -> None:
    assert identities(request("203.0.113.7"), spec(KeyKind.IP)) == [IP]


def test_ip_kind_without_remote_addr() -> None:
    assert identities(request(None), spec(KeyKind.IP)) == [Identity("ip", UNKNOWN)]


def test_user_kind(user: User) -> None:
    req = with_user(request("203.0.113.7"), user)
    assert identities(req, spec(KeyKind.USER)) == [Identity("user", str(user.pk))]


def test_user_kind_does_not_count_anonymous_users() -> None:
    assert identities(with_user(request(), AnonymousUser()), spec(KeyKind.USER)) == []
    assert identities(request(), spec(KeyKind.USER)) == []  # no AuthenticationMiddleware


def test_user_or_ip(user: User) -> None:
    req = with_user(request("203.0.113.7"), user)
    assert identities(req, spec(KeyKind.USER_OR_IP)) == [Identity("user", str(user.pk))]
    anonymous = with_user(request("203.0.113.7"), AnonymousUser())
    assert identities(anonymous, spec(KeyKind.USER_OR_IP)) == [IP]


def test_ip_and_user(user: User) -> None:
    req = with_user(request("203.0.113.7"), user)
    assert identities(req, spec(KeyKind.IP_AND_USER)) == [IP, Identity("user", str(user.pk))]
    anonymous = with_user(request("203.0.113.7"), AnonymousUser())
    assert identities(anonymous, spec(KeyKind.IP_AND_USER)) == [IP]


def test_user_identity_uses_the_client_ip_rules(user: User) -> None:
    req = with_user(request(x_forwarded_for="1.2.3.4"), user)
    with configured(trusted_proxies=PROXIES):
        assert identities(req, spec(KeyKind.IP_AND_USER))[0] == Identity("ip", "1.2.3.4")


def test_header_kind() -> None:
    req = request("203.0.113.7", x_api_key="k-123")
    assert identities(req, spec(KeyKind.HEADER, "X-Api-Key")) == [Identity("header", "k-123")]
    assert identities(req, spec(KeyKind.HEADER, "x-api-key")) == [Identity("header", "k-123")]


@pytest.mark.parametrize("headers", [{}, {"x_api_key": ""}, {"x_api_key": "  "}])
def test_header_kind_falls_back_to_the_ip(headers: dict[str, str]) -> None:
    req = request("203.0.113.7", **headers)
    assert identities(req, spec(KeyKind.HEADER, "X-Api-Key")) == [IP]


def test_header_kind_keeps_hostile_values_whole() -> None:
    value = "{a} b\nc" * 1000
    req = request("203.0.113.7", x_api_key=value)
    assert identities(req, spec(KeyKind.HEADER, "X-Api-Key")) == [Identity("header", value.strip())]


def key_from_query(request: HttpRequest) -> str | None:
    """A key function for the tests: the ``key`` query parameter, if any."""
    return request.GET.get("key")


def key_as_int(request: HttpRequest) -> object:
    return 42


NOT_CALLABLE = "a string"


def test_callable_kind() -> None:
    policy = spec(KeyKind.CALLABLE, "tests.request.test_identity.key_from_query")
    req = factory.get("/", {"key": "tenant-7"})
    assert identities(req, policy) == [Identity("key", "tenant-7")]


@pytest.mark.parametrize("query", [{}, {"key": ""}])
def test_callable_kind_none_or_empty_is_not_counted(query: dict[str, str]) -> None:
    policy = spec(KeyKind.CALLABLE, "tests.request.test_identity.key_from_query")
    assert identities(factory.get("/", query), policy) == []


def test_callable_is_imported_once(monkeypatch: pytest.MonkeyPatch) -> None:
    key_function.cache_clear()
    calls = []
    real = identity_module.import_string

    def counting(path: str) -> Any:
        calls.append(path)
        return real(path)

    monkeypatch.setattr(identity_module, "import_string", counting)
    policy = spec(KeyKind.CALLABLE, "tests.request.test_identity.key_from_query")
    for _ in range(3):
        identities(factory.get("/", {"key": "k"}), policy)
    assert calls == ["tests.request.test_identity.key_from_query"]


@pytest.mark.parametrize(
    "path", ["tests.request.test_identity.missing", "tests.request.test_identity.NOT_CALLABLE"]
)
def test_callable_that_cannot_be_loaded(path: str) -> None:
    with pytest.raises(ImproperlyConfigured, match="key function"):
        identities(request(), spec(KeyKind.CALLABLE, path))


def test_callable_returning_a_non_string() -> None:
    with pytest.raises(TypeError, match="must return a str or None, not int"):
        identities(request(), spec(KeyKind.CALLABLE, "tests.request.test_identity.key_as_int"))


def test_every_key_kind_is_handled() -> None:
    for kind in KeyKind:
        arg = {
            KeyKind.HEADER: "X-Api-Key",
            KeyKind.CALLABLE: "tests.request.test_identity.key_from_query",
        }
        assert isinstance(identities(request(), spec(kind, arg.get(kind, ""))), list)


# --------------------------------------------------------------------------- docs

DOCS = Path(__file__).resolve().parents[2] / "docs" / "client-ip.md"


def _doc_examples() -> list[tuple[str, str, str]]:
    """The rows of the X-Forwarded-For table in docs/client-ip.md."""
    section = DOCS.read_text().split("### Examples", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip().strip("`") for cell in line.strip().strip("|").split("|")]
        if len(cells) == 4 and re.fullmatch(r"[0-9.]+", cells[0]):
            rows.append((cells[0], cells[1], cells[2]))
    return rows


def test_the_documented_examples_hold() -> None:
    rows = _doc_examples()
    assert len(rows) == 8
    for remote, chain, expected in rows:
        headers = {"x_forwarded_for": chain} if chain else {}
        with configured(trusted_proxies=["10.0.0.0/8"]):
            assert client_ip(request(remote, **headers)) == expected, (remote, chain)
