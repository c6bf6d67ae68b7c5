"""Tiers (inline on the policy form) and identity overrides in admin, as a superuser."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_ratelimits.models import Policy, PolicyTier, RateOverride
from tests.dashboard.test_admin import add_url, change_url, form

pytestmark = pytest.mark.django_db

OVERRIDE_ADD = "admin:django_ratelimits_rateoverride_add"


def tier(index: int, **fields: str) -> dict[str, str]:
    row = {"order": "0", "match": "group", "name": "", "value": "", "rates": ""} | fields
    return {f"tiers-{index}-{key}": value for key, value in row.items()}


def test_tiers_are_added_inline_and_a_bad_one_is_a_form_error(admin_client: Client) -> None:
    Group.objects.create(name="pro")
    bad = form(**{"tiers-TOTAL_FORMS": "1"}, **tier(0, name="nobody", rates="5/x"))
    response = admin_client.post(add_url(), bad)
    assert response.status_code == 200
    page = response.content.decode()
    assert "No group is named" in page and "unknown unit" in page
    assert not Policy.objects.exists()
    good = form(**{"tiers-TOTAL_FORMS": "1"}, **tier(0, name="pro", rates="5000/h"))
    assert admin_client.post(add_url(), good).status_code == 302
    assert [str(t) for t in PolicyTier.objects.all()] == ["pro"]
    page = admin_client.get(change_url(Policy.objects.get())).content.decode()
    assert "Signed-in users in the group “pro” instead: 5000 requests per hour." in page


def override_form(**fields: Any) -> dict[str, Any]:
    expires = timezone.localtime() + timedelta(days=1)
    data = {
        "identity": "ip:203.0.113.7",
        "policy": "",
        "rates": "100/h",
        "expires_at_0": expires.strftime("%Y-%m-%d"),
        "expires_at_1": expires.strftime("%H:%M:%S"),
        "reason": "load test",
    }
    return data | fields


def test_an_override_is_saved_as_the_limiter_counts_it(admin_client: Client) -> None:
    Policy.objects.create(name="api", rates="10/s", path="^/api/")  # counts addresses
    url = reverse(OVERRIDE_ADD)
    for bad, error in [
        ({"identity": "ip:not-an-address"}, "is not an IP address"),
        ({"identity": "user:nobody"}, "nobody"),
        ({"rates": "5000000/s"}, "rates"),
    ]:
        response = admin_client.post(url, override_form(**bad))
        assert response.status_code == 200
        assert error in response.content.decode()
    assert not RateOverride.objects.exists()
    assert admin_client.post(url, override_form(identity="ip:2001:db8::7")).status_code == 302
    row = RateOverride.objects.get()
    assert (row.identity_kind, row.identity_value) == ("ip", "2001:db8::/64")
    assert row.created_by == User.objects.get(is_superuser=True)


def test_an_override_for_every_policy_needs_one_that_counts_its_kind(
    admin_client: Client,
) -> None:
    """Saved, it would be listed as in force while no check ever read it."""
    Policy.objects.create(name="api", rates="10/s", path="^/api/")  # counts addresses
    url = reverse(OVERRIDE_ADD)
    response = admin_client.post(url, override_form(identity="header:PARTNER"))
    assert response.status_code == 200
    assert "No enabled policy counts the requests of Header identities" in response.content.decode()
    assert not RateOverride.objects.exists()
    Policy.objects.create(name="keys", rates="10/s", key="header", key_arg="X-Api-Key")
    assert admin_client.post(url, override_form(identity="header:PARTNER")).status_code == 302


@pytest.mark.parametrize(
    ("change", "field"),
    [({"algorithm": "concurrency", "rates": "5"}, "algorithm"), ({"key": "user"}, "key")],
    ids=["to-concurrency", "to-user-key"],
)
def test_a_policy_edit_that_would_strand_its_overrides_is_a_form_error(
    admin_client: Client, change: dict[str, str], field: str
) -> None:
    from django_ratelimits.engine import Identity
    from django_ratelimits.policies.registry import PolicyRegistry
    from tests.overrides_helpers import override

    policy = Policy.objects.create(name="api", rates="10/s, 120/m", path="^/api/")
    override("ip:203.0.113.7", "1000/h", policy=policy)
    response = admin_client.post(change_url(policy), form(**change))
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "would no longer apply (ip:203.0.113.7)" in str(errors[field])
    registry = PolicyRegistry()
    registry.refresh()
    assert registry.own_limits("api", Identity("ip", "203.0.113.7")) is not None


def test_the_override_list_filters_by_expiry_and_searches(admin_client: Client) -> None:
    now = timezone.now()
    for value, expires in (("198.51.100.1", now + timedelta(hours=1)), ("198.51.100.2", now)):
        RateOverride.objects.create(
            identity_kind="ip", identity_value=value, rates="9/h", expires_at=expires, reason="r"
        )
    url = reverse("admin:django_ratelimits_rateoverride_changelist")
    active = admin_client.get(url, {"expiry": "active"}).content.decode()
    assert "198.51.100.1" in active and "198.51.100.2" not in active
    expired = admin_client.get(url, {"expiry": "expired", "q": "100.2"}).content.decode()
    assert "198.51.100.2" in expired and "198.51.100.1" not in expired


def test_a_deleted_users_override_is_edited_but_none_is_made_for_an_id_no_user_has(
    admin_client: Client, django_user_model: Any
) -> None:
    """Editing an override whose user was deleted since failed validation ("no user has
    the id or username"), so its rates or expiry could not be changed, only deleted."""
    Policy.objects.create(name="api", rates="10/s", key="user", path="^/api/")
    spam = django_user_model.objects.create_user("spam", password="x")
    bob = django_user_model.objects.create_user("bob", password="x")
    add = reverse(OVERRIDE_ADD)
    for who in ("user:spam", f"user:{bob.pk}"):
        assert admin_client.post(add, override_form(identity=who)).status_code == 302
    row = RateOverride.objects.get(identity_value=str(spam.pk))
    other = RateOverride.objects.get(identity_value=str(bob.pk))
    pk = str(spam.pk)
    spam.delete()
    change = reverse("admin:django_ratelimits_rateoverride_change", args=[row.pk])
    page = admin_client.get(change).content.decode()
    assert "No user has this id any more (deleted)" in page
    assert f'value="user:{pk}"' in page
    shorter = timezone.localtime() + timedelta(minutes=5)
    edit = override_form(
        identity=f"user:{pk}",
        rates="5/h",
        expires_at_0=shorter.strftime("%Y-%m-%d"),
        expires_at_1=shorter.strftime("%H:%M:%S"),
        reason="spam account, deleted",
    )
    response = admin_client.post(change, edit)
    assert response.status_code == 302, response.content.decode()
    row.refresh_from_db()
    assert (row.identity_kind, row.identity_value, row.rates) == ("user", pk, "5/h")
    assert row.reason == "spam account, deleted"
    assert abs((row.expires_at - shorter).total_seconds()) < 1
    # Bob's override keeps the usual help; an existing user's is not called gone.
    other_change = reverse("admin:django_ratelimits_rateoverride_change", args=[other.pk])
    assert "No user has this id any more" not in admin_client.get(other_change).content.decode()
    # No override is made for an id no user has: not anew, not by moving bob's there,
    # not by a mistyped id on the deleted user's own form.
    mistyped = str(int(pk) + 1000)
    for url, who in ((add, pk), (other_change, pk), (change, mistyped)):
        response = admin_client.post(url, override_form(identity=f"user:{who}"))
        assert response.status_code == 200
        assert "no user has the id or username" in response.content.decode()
    assert RateOverride.objects.count() == 2
    other.refresh_from_db()
    assert other.identity_value == str(bob.pk)
    row.refresh_from_db()
    assert row.identity_value == pk


OVERRIDE_LIST = "admin:django_ratelimits_rateoverride_changelist"
OVERRIDE_CHANGE = "admin:django_ratelimits_rateoverride_change"


def listed(client: Client) -> dict[str, str]:
    """The override list's rows as the page shows them, by their identity's link text."""
    page = client.get(reverse(OVERRIDE_LIST)).content.decode()
    body = page.split('id="result_list"', 1)[1].split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.S)
    return {re.findall(r"<a [^>]*>([^<]*)</a>", row)[0]: row for row in rows}


def test_a_deleted_users_override_is_not_in_force_and_names_the_user_gone(
    admin_client: Client, django_user_model: Any
) -> None:
    """The list ticked "in force" for the override of a user deleted since, though nothing
    authenticates as that user and no request could match it."""
    from tests.overrides_helpers import override

    Policy.objects.create(name="api", rates="10/s", key="user", path="^/api/")
    spam = django_user_model.objects.create_user("spam", password="x")
    bob = django_user_model.objects.create_user("bob", password="x")
    row = override(f"user:{spam.pk}", "100/h", policy=None)
    override(f"user:{bob.pk}", "100/h", policy=None)
    override("ip:203.0.113.7", "100/h", policy=None)
    pk = spam.pk
    spam.delete()
    rows = listed(admin_client)
    gone = rows[f"user {pk} (no longer exists)"]
    assert 'alt="False"' in gone and 'alt="True"' not in gone
    # An existing user's override and an address's are listed as before: in force.
    for shown in (f"user:{bob.pk}", "ip:203.0.113.7"):
        assert 'alt="True"' in rows[shown] and "no longer exists" not in rows[shown]
    assert set(rows) == {f"user {pk} (no longer exists)", f"user:{bob.pk}", "ip:203.0.113.7"}
    # The filter by expiry does not call every override not expired "in force" either.
    page = admin_client.get(reverse(OVERRIDE_LIST)).content.decode()
    assert "?expiry=active" in page and ">not expired</a>" in page and ">in force</a>" not in page
    # Its own page still opens under the identity staff type, and says the user is gone.
    change = admin_client.get(reverse(OVERRIDE_CHANGE, args=[row.pk])).content.decode()
    assert f'value="user:{pk}"' in change and "No user has this id any more" in change


def test_the_override_list_asks_for_its_users_in_one_query(
    admin_client: Client, django_user_model: Any, django_assert_num_queries: Any
) -> None:
    """One query for the page's users, however many rows name one: 1 row and 5 rows (of
    deleted and existing users) cost the same number of queries."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tests.overrides_helpers import override

    Policy.objects.create(name="api", rates="10/s", key="user", path="^/api/")

    def add(name: str, *, delete: bool) -> str:
        user = django_user_model.objects.create_user(name, password="x")
        pk = user.pk
        override(f"user:{pk}", "100/h", policy=None)
        if delete:
            user.delete()
            return f"user {pk} (no longer exists)"
        return f"user:{pk}"

    shown = [add("u0", delete=True)]
    listed(admin_client)  # what the first request of a session caches
    with CaptureQueriesContext(connection) as one_row:
        assert list(listed(admin_client)) == shown
    shown += [add(f"u{n}", delete=n % 2 == 1) for n in range(1, 5)]
    with django_assert_num_queries(len(one_row.captured_queries)):
        rows = listed(admin_client)
    assert sorted(rows) == sorted(shown)
    for text, row in rows.items():
        assert ('alt="True"' in row) == ("no longer exists" not in text)
