"""``manage.py ratelimits block-network``, ``unblock-network`` and ``networks``."""

from __future__ import annotations

import datetime

import pytest
from django.core.management import CommandError
from django.utils import timezone

from django_ratelimits.models import BlockedNetwork, PolicyVersion
from django_ratelimits.policies import get_registry
from tests.operations.test_command import run, run_json, switched_off

pytestmark = pytest.mark.django_db


def test_block_list_and_unblock_a_network() -> None:
    stamp = PolicyVersion.current()
    text = run("block-network", "203.0.113.0/24", "--reason", "scraper", "--for", "1d")
    assert text.startswith("203.0.113.0/24: blocked for 1d;")
    entry = BlockedNetwork.objects.get()
    assert entry.reason == "scraper" and entry.created_by is None
    assert entry.expires_at is not None
    left = entry.expires_at - timezone.now()
    assert datetime.timedelta(hours=23) < left <= datetime.timedelta(days=1)
    assert PolicyVersion.current() != stamp
    get_registry().refresh()
    assert len(get_registry().blocklist) == 1

    listed = run_json("networks")["networks"]
    assert [(e["network"], e["reason"], e["in_force"]) for e in listed] == [
        ("203.0.113.0/24", "scraper", True)
    ]
    assert "203.0.113.0/24  yes" in run("networks")

    assert run("unblock-network", "203.0.113.0/24").startswith("203.0.113.0/24: 1 entry removed")
    assert not BlockedNetwork.objects.exists()
    assert "nothing removed" in run("unblock-network", "203.0.113.0/24")


def test_a_network_blocked_while_limiting_is_switched_off_says_it_is_not_refused() -> None:
    with switched_off():
        text = run("block-network", "203.0.113.0/24", "--reason", "scraper")
    assert text.startswith("203.0.113.0/24: blocked until unblocked; limiting is switched off")
    assert "refuses" not in text


def test_a_single_address_and_a_mapped_one_are_stored_canonically() -> None:
    run("block-network", "2001:db8::7")
    run("block-network", "::ffff:192.0.2.1", "--reason", "mapped")
    assert set(BlockedNetwork.objects.values_list("network", flat=True)) == {
        "2001:db8::7/128",
        "192.0.2.1/32",
    }
    assert run_json("unblock-network", "192.0.2.1")["removed"] == 1


@pytest.mark.parametrize(
    ("network", "message"),
    [
        ("203.0.113.5/24", "did you mean 203.0.113.0/24?"),
        ("0.0.0.0/0", "covers too many addresses"),
        ("nonsense", "is not an IP address or network"),
    ],
)
def test_a_bad_network_exits_with_the_reason(network: str, message: str) -> None:
    with pytest.raises(CommandError, match=message):
        run("block-network", network)
    with pytest.raises(CommandError, match=message):
        run("unblock-network", network)
    assert not BlockedNetwork.objects.exists()


def test_networks_lists_only_those_in_force_unless_all() -> None:
    BlockedNetwork.objects.create(network="192.0.2.0/24", reason="line one\nline two")
    BlockedNetwork.objects.create(network="198.51.100.0/24", enabled=False)
    BlockedNetwork.objects.create(
        network="203.0.113.0/24", expires_at=timezone.now() - datetime.timedelta(minutes=1)
    )
    assert [e["network"] for e in run_json("networks")["networks"]] == ["192.0.2.0/24"]
    every = {e["network"]: e["in_force"] for e in run_json("networks", "--all")["networks"]}
    assert every == {"192.0.2.0/24": True, "198.51.100.0/24": False, "203.0.113.0/24": False}
    assert "line one line two" in run("networks")
    BlockedNetwork.objects.all().delete()
    assert run("networks") == "0 blocked networks in force.\n"
