"""Blocked networks without a database: the admin's text checked, the index looked up."""

from __future__ import annotations

import ipaddress
import math
import random

import pytest
from django.core.exceptions import ValidationError

from django_ratelimits.policies.networks import BlockedEntry, NetworkIndex, parse_network


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("203.0.113.0/24", "203.0.113.0/24"),
        (" 203.0.113.7 ", "203.0.113.7/32"),
        ("2001:DB8::/32", "2001:db8::/32"),
        ("2001:db8::7", "2001:db8::7/128"),
        ("::ffff:203.0.113.0/120", "203.0.113.0/24"),
        ("::ffff:203.0.113.5", "203.0.113.5/32"),
        ("10.0.0.0/8", "10.0.0.0/8"),
        ("2001::/16", "2001::/16"),
    ],
)
def test_networks_are_stored_in_canonical_form(text: str, canonical: str) -> None:
    assert str(parse_network(text)) == canonical


@pytest.mark.parametrize(
    ("text", "code", "words"),
    [
        ("", "network", "Enter an IP address"),
        ("203.0.113.0/33", "cidr", "is not an IP address or network"),
        ("example.com", "cidr", "is not an IP address or network"),
        ("1.2.3.4/8\n", "cidr_host_bits", "did you mean 1.0.0.0/8?"),
        ("203.0.113.5/24", "cidr_host_bits", "did you mean 203.0.113.0/24?"),
        ("0.0.0.0/0", "network_too_broad", "the broadest entry allowed is a /8"),
        ("128.0.0.0/1", "network_too_broad", "/8"),
        ("::/0", "network_too_broad", "/16"),
        ("2000::/3", "network_too_broad", "/16"),
        ("::ffff:0.0.0.0/96", "network_too_broad", "/8"),
        ("٣.٣.٣.٣", "network", "Enter an IP address"),
        ("1" * 65, "network", "Enter an IP address"),
    ],
)
def test_bad_networks_are_validation_errors(text: str, code: str, words: str) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_network(text)
    assert caught.value.code == code
    assert words in caught.value.messages[0]


def _entry(text: str, expires: float | None = None, reason: str = "") -> BlockedEntry:
    return BlockedEntry(parse_network(text), reason, expires)


def test_the_most_specific_live_entry_answers() -> None:
    index = NetworkIndex(
        [_entry("10.0.0.0/8", reason="wide"), _entry("10.1.2.0/24", 50.0, "narrow")], now=0
    )
    found = index.find(ipaddress.ip_address("10.1.2.3"), now=10)
    assert found is not None and found.reason == "narrow"
    later = index.find(ipaddress.ip_address("10.1.2.3"), now=50)  # expired, not yet pruned
    assert later is not None and later.reason == "wide"
    assert index.find(ipaddress.ip_address("11.0.0.1"), now=10) is None
    assert index.find(ipaddress.ip_address("2001:db8::1"), now=10) is None


def test_an_ipv6_entry_never_matches_an_ipv4_address_of_equal_bits() -> None:
    index = NetworkIndex([_entry("::a00:0/104")], now=0)  # the bits of 10.0.0.0/8
    assert index.find(ipaddress.ip_address("10.0.0.1"), now=0) is None
    assert index.find(ipaddress.ip_address("::a00:1"), now=0) is not None


def test_the_same_network_twice_keeps_the_longer_entry() -> None:
    index = NetworkIndex([_entry("10.0.0.0/8", 100.0), _entry("10.0.0.0/8", None)], now=0)
    assert index.find(ipaddress.ip_address("10.0.0.1"), now=200) is not None
    index = NetworkIndex([_entry("10.0.0.0/8", 300.0), _entry("10.0.0.0/8", 100.0)], now=0)
    assert index.find(ipaddress.ip_address("10.0.0.1"), now=200) is not None


def test_expired_entries_are_left_out_and_the_next_expiry_is_known() -> None:
    entries = [_entry("10.0.0.0/8", 5.0), _entry("11.0.0.0/8", 20.0), _entry("12.0.0.0/8")]
    index = NetworkIndex(entries, now=10)
    assert len(index) == 2 and index.next_expiry == 20.0
    pruned = index.pruned(20)
    assert len(pruned) == 1 and pruned.next_expiry == math.inf


def test_ten_thousand_entries_answer_as_a_linear_scan_would() -> None:
    rng = random.Random(7)
    entries = []
    for _ in range(10_000):
        prefix = rng.choice([12, 16, 20, 24, 28, 32])
        bits = rng.getrandbits(32) >> (32 - prefix) << (32 - prefix)
        entries.append(BlockedEntry(ipaddress.IPv4Network((bits, prefix))))
    index = NetworkIndex(entries)
    answers = set()
    for _ in range(1000):
        if rng.random() < 0.5:  # inside an entry, else anywhere
            network = rng.choice(entries).network
            address = network.network_address + rng.randrange(network.num_addresses)
        else:
            address = ipaddress.IPv4Address(rng.getrandbits(32))
        expected = any(address in e.network for e in entries)
        assert (index.find(address, 0) is not None) is expected
        answers.add(expected)
    assert answers == {True, False}


@pytest.mark.parametrize(
    "text",
    [
        "10.0.0.0/255.0.0.0",
        "2001:0DB8:0000::/48",
        "::ffff:10.0.0.0/104",
        "01.2.3.4",
        "1.2.3.4/08",
        "1.2.3.4/ 8",
        "fe80::1%eth0",
        "1.2.3.4/+8",
        "1.2.3.4/1_6",
        "1.2.3.4/",
        "1.2.3.4/33",
        "::/129",
        "10.0.0.1/8",
    ],
)
def test_the_fast_path_agrees_with_ip_network(text: str) -> None:
    try:
        expected: object = ipaddress.ip_network(text)
    except ValueError:
        expected = None
    try:
        parsed: object = parse_network(text)
    except ValidationError as exc:
        parsed = None
        assert exc.code in ("cidr", "cidr_host_bits")
    if isinstance(expected, ipaddress.IPv6Network) and expected.subnet_of(
        ipaddress.IPv6Network("::ffff:0:0/96")
    ):
        mapped = int(expected.network_address) & 0xFFFFFFFF
        expected = ipaddress.IPv4Network((mapped, expected.prefixlen - 96))
    assert parsed == expected


@pytest.mark.django_db
def test_rows_written_around_the_checks_are_skipped_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from django_ratelimits.models import BlockedNetwork, PolicyVersion
    from django_ratelimits.policies import PolicyRegistry

    texts = ["garbage", "0.0.0.0/0", "10.0.0.5/8", "::ffff:10.0.0.0/104", "192.0.2.0/24"]
    BlockedNetwork.objects.bulk_create(BlockedNetwork(network=t) for t in texts)
    PolicyVersion.bump()  # bulk_create sends no signal
    registry = PolicyRegistry()
    registry.refresh()
    assert sorted(str(e.network) for e in registry.blocklist.entries) == [
        "10.0.0.0/8",
        "192.0.2.0/24",
    ]
    skipped = [r.getMessage() for r in caplog.records if "is invalid and skipped" in r.getMessage()]
    assert len(skipped) == 3


@pytest.mark.django_db
def test_an_unreadable_blocklist_table_keeps_the_policies_and_is_tried_again(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.db import DatabaseError

    from django_ratelimits.models import BlockedNetwork, Policy
    from django_ratelimits.policies import PolicyRegistry

    Policy.objects.create(name="api", rates="5/m", path="^/api/")
    BlockedNetwork.objects.create(network="192.0.2.0/24")
    registry = PolicyRegistry()

    def unreadable(*args: object, **kwargs: object) -> None:
        raise DatabaseError("no such table: django_ratelimits_blockednetwork")

    with monkeypatch.context() as patch:  # as before migration 0006 ran
        patch.setattr(BlockedNetwork.objects, "filter", unreadable)
        registry.refresh()
    assert registry.get("api") is not None
    assert len(registry.blocklist) == 0
    assert "could not load the blocked networks" in caplog.text
    registry.refresh()  # the stamp was not taken: the next refresh loads them
    assert len(registry.blocklist) == 1
