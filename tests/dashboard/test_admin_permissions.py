"""The package's model admins for staff with few permissions: each page and each write
answers as its model's permissions say, by direct POST too (the buttons hidden or not)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Group, Permission
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_ratelimits.models import BlockedNetwork, Policy, PolicyTier, RateOverride
from tests.dashboard.test_admin import form as policy_form

pytestmark = pytest.mark.django_db


def account(django_user_model: Any, *perms: str) -> Client:
    name = f"clerk{django_user_model.objects.count()}"
    user = django_user_model.objects.create_user(name, password="x", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="django_ratelimits", codename__in=perms)
    )
    client = Client()
    client.force_login(user)
    return client


def url(model: str, view: str, *args: Any) -> str:
    return reverse(f"admin:django_ratelimits_{model}_{view}", args=args)


@pytest.fixture
def rows() -> dict[str, Any]:
    Group.objects.create(name="partners")
    policy = Policy.objects.create(name="api", rates="10/s", path="^/api/", enabled=False)
    PolicyTier.objects.create(policy=policy, order=1, match="group", name="partners", rates="1/s")
    override = RateOverride.objects.create(
        identity_kind="ip",
        identity_value="203.0.113.7",
        policy=policy,
        rates="1000/s",
        expires_at=timezone.now() + timezone.timedelta(days=1),
    )
    network = BlockedNetwork.objects.create(network="127.0.0.0/24", reason="abuse")
    return {"policy": policy, "rateoverride": override, "blockednetwork": network}


def unchanged(rows: dict[str, Any]) -> None:
    policy = Policy.objects.get()
    assert (policy.enabled, policy.mode, policy.rates) == (False, "enforce", "10/s")
    assert list(PolicyTier.objects.values_list("rates", flat=True)) == ["1/s"]
    assert RateOverride.objects.get().rates == "1000/s"
    assert BlockedNetwork.objects.get().enabled
    assert not LogEntry.objects.exists()


@pytest.mark.parametrize("model", ["policy", "rateoverride", "blockednetwork"])
def test_staff_without_permissions_reach_no_list_and_change_nothing(
    rows: dict[str, Any], django_user_model: Any, model: str
) -> None:
    client = account(django_user_model)
    pk = rows[model].pk
    for page in (url(model, "changelist"), url(model, "add"), url(model, "change", pk)):
        assert client.get(page).status_code == 403
    assert client.post(url(model, "change", pk), {}).status_code == 403
    assert client.post(url(model, "delete", pk), {"post": "yes"}).status_code == 403
    unchanged(rows)


@pytest.mark.parametrize("model", ["policy", "rateoverride", "blockednetwork"])
def test_the_view_permission_reads_and_changes_nothing(
    rows: dict[str, Any], django_user_model: Any, model: str
) -> None:
    client = account(django_user_model, f"view_{model}")
    pk = rows[model].pk
    assert client.get(url(model, "changelist")).status_code == 200
    assert client.get(url(model, "change", pk)).status_code == 200  # read-only
    assert client.get(url(model, "add")).status_code == 403
    assert client.post(url(model, "change", pk), {}).status_code == 403
    assert client.post(url(model, "delete", pk), {"post": "yes"}).status_code == 403
    unchanged(rows)


@pytest.mark.parametrize("action", ["enable", "disable", "switch_to_shadow", "switch_to_enforce"])
def test_the_bulk_switches_need_the_change_permission(
    rows: dict[str, Any], django_user_model: Any, action: str
) -> None:
    client = account(django_user_model, "view_policy", "view_policytier")
    page = client.get(url("policy", "changelist")).content.decode()
    assert f'value="{action}"' not in page
    selected = {"action": action, "_selected_action": [rows["policy"].pk], "index": "0"}
    client.post(url("policy", "changelist"), selected)
    unchanged(rows)


def test_the_tiers_inline_follows_the_tier_permissions(
    rows: dict[str, Any], django_user_model: Any
) -> None:
    # Changing a policy does not grant its tiers: without view_policytier they are not
    # shown, and a posted tier formset is not saved.
    client = account(django_user_model, "view_policy", "change_policy")
    page = client.get(url("policy", "change", rows["policy"].pk)).content.decode()
    assert "tiers-TOTAL_FORMS" not in page
    tier = PolicyTier.objects.get()
    form = {
        **policy_form(enabled=False, rates="10/s"),
        "tiers-TOTAL_FORMS": "1",
        "tiers-INITIAL_FORMS": "1",
        "tiers-0-id": str(tier.pk),
        "tiers-0-policy": str(rows["policy"].pk),
        "tiers-0-order": "1",
        "tiers-0-match": "group",
        "tiers-0-name": "partners",
        "tiers-0-rates": "1000/s",
    }
    assert client.post(url("policy", "change", rows["policy"].pk), form).status_code == 302
    assert PolicyTier.objects.get().rates == "1/s"
    # The same form from staff who may change tiers changes the tier.
    editor = account(
        django_user_model, "view_policy", "change_policy", "view_policytier", "change_policytier"
    )
    assert editor.post(url("policy", "change", rows["policy"].pk), form).status_code == 302
    assert PolicyTier.objects.get().rates == "1000/s"
