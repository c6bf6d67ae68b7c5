"""Policy admin through the test client, as a signed-in superuser."""

from __future__ import annotations

import html
from dataclasses import replace
from typing import Any

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, LogEntry
from django.test import Client
from django.urls import reverse

from django_ratelimits.admin import describe
from django_ratelimits.engine import Ban
from django_ratelimits.models import Policy, PolicyVersion
from django_ratelimits.policies.spec import Mode
from tests.policies.test_models import INVALID

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:django_ratelimits_policy_changelist"
# The management form of the tiers inline, with no tier: every post of the policy form has one.
NO_TIERS = {"tiers-TOTAL_FORMS": "0", "tiers-INITIAL_FORMS": "0"}


def form(**fields: Any) -> dict[str, Any]:
    """The add/change form as a browser posts it (unchecked boxes are left out)."""
    data: dict[str, Any] = {
        "name": "api",
        "description": "",
        "enabled": "on",
        "mode": "enforce",
        "algorithm": "sliding_window",
        "rates": "10/s, 120/m",
        "burst": "",
        "cost": "1",
        "path": "^/api/",
        "methods": "",
        "priority": "0",
        "key": "ip",
        "key_arg": "",
        "allow_cidrs": "",
        "record_metadata": "denials",
        "counts": "requests",
        "ban_after": "0",
        **NO_TIERS,
    }
    data.update(fields)
    return {key: value for key, value in data.items() if value is not False}


def add_url() -> str:
    return reverse("admin:django_ratelimits_policy_add")


def change_url(policy: Policy) -> str:
    return reverse("admin:django_ratelimits_policy_change", args=[policy.pk])


def field_row(page: str, field: str) -> str:
    """The HTML of the form row of ``field``."""
    start = page.index(f"field-{field}")
    end = page.find('class="form-row', start)
    return page[start : end if end > 0 else len(page)]


def test_changelist_lists_policies(admin_client: Client) -> None:
    Policy.objects.create(name="login", rates="5/m", path="^/login/", methods="POST")
    Policy.objects.create(name="api", rates="10/s", enabled=False)
    response = admin_client.get(reverse(CHANGELIST))
    assert response.status_code == 200
    page = response.content.decode()
    for text in ("login", "api", "5/m", "^/login/", "POST", "Sliding window", "Client IP"):
        assert text in page
    response = admin_client.get(reverse(CHANGELIST), {"q": "login", "enabled__exact": "1"})
    assert list(response.context["cl"].result_list) == [Policy.objects.get(name="login")]


def test_add_a_valid_policy(admin_client: Client) -> None:
    response = admin_client.post(
        add_url(), form(rates="120/60s,10/s", methods="post get", exempt_staff="on")
    )
    assert response.status_code == 302
    policy = Policy.objects.get(name="api")
    assert (policy.rates, policy.methods, policy.exempt_staff) == ("120/m, 10/s", "GET, POST", True)
    assert LogEntry.objects.get(object_id=str(policy.pk)).action_flag == ADDITION
    assert PolicyVersion.current() is not None


def test_a_malformed_rate_is_shown_next_to_the_field(admin_client: Client) -> None:
    response = admin_client.post(add_url(), form(rates="10/s, 5/x"))
    assert response.status_code == 200
    page = response.content.decode()
    row = field_row(page, "rates")
    assert 'class="errorlist' in row
    assert html.escape("unknown unit 'x' (expected s, m, h or d)") in row
    assert not Policy.objects.exists()


@pytest.mark.parametrize(("fields", "field", "fragment"), INVALID)
def test_every_validation_error_reaches_the_form(
    admin_client: Client, fields: dict[str, Any], field: str, fragment: str
) -> None:
    data = form(**{k: "" if v is None else str(v) for k, v in fields.items()})
    response = admin_client.post(add_url(), data)
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == [field]
    assert fragment in " ".join(errors[field])
    # The error list is rendered inside the field's own row (markup differs by Django version).
    assert 'class="errorlist' in field_row(response.content.decode(), field)


def test_errors_on_the_change_form_keep_the_saved_policy(admin_client: Client) -> None:
    policy = Policy.objects.create(name="api", rates="10/s", path="^/api/")
    response = admin_client.post(change_url(policy), form(rates="10/s", key="header"))
    assert response.status_code == 200
    assert "Enter the header to count by" in field_row(response.content.decode(), "key_arg")
    assert "10 requests per second per client IP" in response.content.decode()  # the preview
    policy.refresh_from_db()
    assert policy.key == "ip"


def test_a_duplicate_name_is_a_form_error(admin_client: Client) -> None:
    Policy.objects.create(name="api", rates="10/s")
    response = admin_client.post(add_url(), form())
    assert response.status_code == 200
    assert "already exists" in field_row(response.content.decode(), "name")


@pytest.mark.parametrize(
    ("action", "field", "before", "after"),
    [
        ("enable", "enabled", False, True),
        ("disable", "enabled", True, False),
        ("switch_to_shadow", "mode", "enforce", "shadow"),
        ("switch_to_enforce", "mode", "shadow", "enforce"),
    ],
)
def test_bulk_actions_change_log_and_bump(
    admin_client: Client, action: str, field: str, before: object, after: object
) -> None:
    changing = [
        Policy.objects.create(name=f"p{i}", rates="10/s", **{field: before}) for i in range(3)
    ]
    unchanged = Policy.objects.create(name="same", rates="10/s", **{field: after})
    stamp = PolicyVersion.current()
    selected = [p.pk for p in [*changing, unchanged]]
    response = admin_client.post(
        reverse(CHANGELIST), {"action": action, "_selected_action": selected}, follow=True
    )
    assert response.status_code == 200
    assert "3 policies changed." in response.content.decode()
    assert {getattr(p, field) for p in Policy.objects.all()} == {after}
    assert PolicyVersion.current() != stamp
    entries = LogEntry.objects.filter(action_flag=CHANGE)
    assert sorted(int(e.object_id) for e in entries) == sorted(p.pk for p in changing)
    label = "Enabled" if field == "enabled" else "Mode"
    assert {e.get_change_message() for e in entries} == {f"Changed {label}."}
    history = admin_client.get(
        reverse("admin:django_ratelimits_policy_history", args=[changing[0].pk])
    )
    assert f"Changed {label}." in history.content.decode()


def test_the_change_form_shows_the_preview(admin_client: Client) -> None:
    policy = Policy.objects.create(
        name="api", rates="120/m, 240/h", path="^/api/", methods="GET, POST", exempt_staff=True
    )
    page = admin_client.get(change_url(policy)).content.decode()
    assert "What this policy does" in page
    assert (
        "<p>120 requests per minute and 240 per hour per client IP, sliding window.</p>"
        "<p>Requests over the limit get 429 Too Many Requests with Retry-After.</p>"
        "<p>Applies to GET and POST requests whose path matches “^/api/”.</p>"
        "<p>Exempt: staff users.</p>"
        "<p>While Redis is unreachable, requests are let through (fail open).</p>"
    ) in page
    assert "What this policy does" not in admin_client.get(add_url()).content.decode()


def test_a_ban_is_saved_in_canonical_form_and_previewed(admin_client: Client) -> None:
    fields = {"ban_after": "5", "ban_within": "600s", "ban_for": "15 min", "ban_max": "24h"}
    assert admin_client.post(add_url(), form(**fields)).status_code == 302
    policy = Policy.objects.get(name="api")
    assert (policy.ban_within, policy.ban_for, policy.ban_max) == ("10m", "15m", "1d")
    page = admin_client.get(change_url(policy)).content.decode()
    assert (
        "<p>After 5 denials within 10 min, the identity is blocked for 15 min, doubled on "
        "each repeat up to 1 d (forgotten after 1 d with no ban).</p>"
    ) in page
    spec = Policy.objects.get(name="api").to_spec()
    one = describe(replace(spec, ban=Ban(5, 600, 900, 900)))
    assert "After 5 denials within 10 min, the identity is blocked for 15 min." in one
    assert not any("denials within" in line for line in describe(replace(spec, mode=Mode.SHADOW)))


def test_a_row_broken_outside_admin_still_opens(admin_client: Client) -> None:
    policy = Policy.objects.create(name="api", rates="10/s")
    Policy.objects.filter(pk=policy.pk).update(rates="lots")
    response = admin_client.get(change_url(policy))
    assert response.status_code == 200
    assert "The saved policy is invalid" in response.content.decode()


def preview(**fields: Any) -> list[str]:
    values: dict[str, Any] = {"name": "api", "rates": "10/s"}
    values.update(fields)
    policy = Policy(**values)
    return describe(policy.to_spec(), policy.enabled)


def test_preview_in_words() -> None:
    assert preview(rates="1/s, 100/5m, 1000/d", mode="shadow", fail_closed=True) == [
        "1 request per second, 100 per 5 minutes and 1000 per day per client IP, sliding window.",
        "Shadow mode: requests over the limit are counted and recorded, never blocked.",
        "Applies only where a decorator or DRF throttle names “api”.",
        "While Redis is unreachable, requests are denied (fail closed).",
        "The user and path of each denial are recorded for the offender dashboard.",
    ]
    assert preview(
        name="login",
        enabled=False,
        rates="5/30s",
        algorithm="gcra",
        burst=2,
        key="user_or_ip",
        methods="POST",
        exempt_superusers=True,
        allow_cidrs="10.0.0.0/8, 192.168.0.0/16, ::1, 127.0.0.1, 172.16.0.0/12",
        record_metadata="every",
    ) == [
        "Disabled: this policy is not enforced.",
        "5 requests per 30 seconds per user, or per client IP when anonymous, "
        "GCRA with bursts of up to 2.",
        "Requests over the limit get 429 Too Many Requests with Retry-After.",
        "Applies only where a decorator or DRF throttle names “login”, to POST requests.",
        "Exempt: superusers and requests from 10.0.0.0/8, 192.168.0.0/16, ::1/128 "
        "and 2 more networks.",
        "While Redis is unreachable, requests are let through (fail open).",
        "The user and path of each hit are recorded for the offender dashboard.",
    ]


def test_preview_of_each_key_and_algorithm() -> None:
    first = {
        ("header", "X-Api-Key", "token_bucket"): "10 requests per second per value of the "
        "X-Api-Key header (per client IP without it), token bucket with bursts up to the limit.",
        ("callable", "tests.policies.test_models.key_for_tests", "fixed_window"): "10 requests per "
        "second per key that tests.policies.test_models.key_for_tests returns (nothing counted "
        "when it returns None), fixed window.",
        ("user", "", "sliding_log"): "10 requests per second per signed-in user (anonymous "
        "requests are not counted), sliding log.",
        ("ip_and_user", "", "sliding_window_counter"): "10 requests per second per client IP "
        "and, separately, per signed-in user, sliding window counter (approximate).",
    }
    for (key, arg, algorithm), sentence in first.items():
        assert preview(key=key, key_arg=arg, algorithm=algorithm)[0] == sentence
    assert preview(rates="2/h, 3/2h, 1/90s")[0].startswith(
        "2 requests per hour, 3 per 2 hours and 1 per 90 seconds per client IP"
    )
    assert preview(path="export")[2] == (
        "Applies to requests of every method whose path matches “export”."
    )
