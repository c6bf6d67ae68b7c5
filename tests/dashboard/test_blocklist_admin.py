"""Blocked networks in admin: form errors, never a 500; the admin's own address; search;
the offenders page's link."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_ratelimits.models import BlockedNetwork, PolicyVersion

pytestmark = pytest.mark.django_db

ADD = "admin:django_ratelimits_blockednetwork_add"
CHANGELIST = "admin:django_ratelimits_blockednetwork_changelist"


def form(**fields: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "network": "203.0.113.0/24",
        "reason": "scraper",
        "enabled": "on",
        "expires_at_0": "",
        "expires_at_1": "",
    }
    data.update(fields)
    return {key: value for key, value in data.items() if value is not False}


@pytest.mark.parametrize(
    ("network", "message"),
    [
        ("not a network", "is not an IP address or network"),
        ("203.0.113.5/24", "has host bits set: did you mean 203.0.113.0/24?"),
        ("0.0.0.0/0", "covers too many addresses"),
        ("::/0", "covers too many addresses"),
        ("::1/129", "is not an IP address or network"),
    ],
)
def test_a_bad_network_is_a_form_error(admin_client: Client, network: str, message: str) -> None:
    response = admin_client.post(reverse(ADD), form(network=network))
    assert response.status_code == 200
    assert message in response.content.decode()
    assert not BlockedNetwork.objects.exists()


def test_an_entry_is_saved_in_canonical_form_by_its_admin(admin_client: Client) -> None:
    stamp = PolicyVersion.current()
    response = admin_client.post(reverse(ADD), form(network="::ffff:198.51.100.7"))
    assert response.status_code == 302
    entry = BlockedNetwork.objects.get()
    assert entry.network == "198.51.100.7/32"
    assert entry.created_by == User.objects.get(username="admin")
    assert PolicyVersion.current() != stamp  # workers reload within POLICY_REFRESH


def test_an_expiry_already_past_is_refused_for_a_new_entry(admin_client: Client) -> None:
    past = timezone.localtime(timezone.now() - datetime.timedelta(hours=1))
    fields = {"expires_at_0": past.strftime("%Y-%m-%d"), "expires_at_1": past.strftime("%H:%M:%S")}
    response = admin_client.post(reverse(ADD), form(**fields))
    assert response.status_code == 200
    assert "already passed" in response.content.decode()


def test_blocking_your_own_address_needs_the_confirmation(admin_client: Client) -> None:
    mine = form(network="127.0.0.0/8")  # the test client's REMOTE_ADDR is 127.0.0.1
    response = admin_client.post(reverse(ADD), mine)
    assert response.status_code == 200
    assert "holds your own address, 127.0.0.1" in response.content.decode()
    assert not BlockedNetwork.objects.exists()
    # Disabled, it blocks nothing: no confirmation needed.
    assert admin_client.post(reverse(ADD), {**mine, "enabled": ""}).status_code == 302
    BlockedNetwork.objects.all().delete()
    confirmed = admin_client.post(reverse(ADD), {**mine, "confirm_own_address": "on"})
    assert confirmed.status_code == 302
    assert BlockedNetwork.objects.get().network == "127.0.0.0/8"


def test_searching_an_address_finds_the_networks_that_hold_it(admin_client: Client) -> None:
    for network in ("203.0.113.0/24", "203.0.0.0/16", "198.51.100.0/24", "2001:db8::/32"):
        BlockedNetwork.objects.create(network=network, reason=f"r-{network}")
    page = admin_client.get(reverse(CHANGELIST), {"q": "203.0.113.9"}).content.decode()
    assert "r-203.0.113.0/24" in page and "r-203.0.0.0/16" in page
    assert "r-198.51.100.0/24" not in page and "r-2001:db8::/32" not in page
    text = admin_client.get(reverse(CHANGELIST), {"q": "r-2001"}).content.decode()
    assert "r-2001:db8::/32" in text and "r-203.0.0.0/16" not in text


def test_the_in_force_filter(admin_client: Client) -> None:
    now = timezone.now()
    BlockedNetwork.objects.create(network="192.0.2.0/24", reason="r-forever")
    BlockedNetwork.objects.create(
        network="198.51.100.0/24", reason="r-gone", expires_at=now - datetime.timedelta(1)
    )
    BlockedNetwork.objects.create(network="203.0.113.0/24", reason="r-off", enabled=False)
    page = admin_client.get(reverse(CHANGELIST), {"in_force": "yes"}).content.decode()
    assert "r-forever" in page and "r-gone" not in page and "r-off" not in page
    page = admin_client.get(reverse(CHANGELIST), {"in_force": "expired"}).content.decode()
    assert "r-gone" in page and "r-forever" not in page


def test_the_offenders_page_counts_and_links_the_blocked_networks(
    admin_client: Client, site_redis: Any
) -> None:
    BlockedNetwork.objects.create(network="192.0.2.0/24")
    BlockedNetwork.objects.create(network="198.51.100.0/24")
    BlockedNetwork.objects.create(network="203.0.113.0/24", enabled=False)
    page = admin_client.get(reverse("admin:django_ratelimits_offenders")).content.decode()
    link = f'href="{reverse(CHANGELIST)}?in_force=yes" id="offenders-blocklist-link">'
    assert f"{link}2 blocked networks</a>" in page


def test_without_the_view_permission_the_offenders_page_has_no_link(
    client: Client, site_redis: Any
) -> None:
    viewer = User.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_offenders"))
    client.force_login(viewer)
    page = client.get(reverse("admin:django_ratelimits_offenders"))
    assert page.status_code == 200
    assert "offenders-blocklist-link" not in page.content.decode()
