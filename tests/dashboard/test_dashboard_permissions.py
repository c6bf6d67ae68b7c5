"""Who may see the offender dashboard and act on it, and that a GET or a forged POST cannot."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from django_ratelimits.engine import Identity, get_engine
from django_ratelimits.engine.controls import Controls
from django_ratelimits.offenders import Offenders
from tests.dashboard.test_dashboard import (
    ACTION,
    ATTACKER,
    DETAIL,
    JSON,
    PAGE,
    QUIET,
    detail_url,
    hit,
    policies,
    remaining,
)

pytestmark = pytest.mark.django_db

RESET = {"kind": "ip", "value": ATTACKER, "action": "reset", "policy": "", "forget": "on"}
BLOCK = {"kind": "ip", "value": QUIET, "action": "block", "seconds": "300"}
ENTRY = "admin:django_ratelimits_offenderdashboard_changelist"  # the app list's Offenders
BLOCKS = "admin:django_ratelimits_blocks"


def account(
    django_user_model: Any, name: str, *perms: str, staff: bool = True, active: bool = True
) -> Client:
    user = django_user_model.objects.create_user(
        name, password="x", is_staff=staff, is_active=active
    )
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="django_ratelimits", codename__in=perms)
    )
    client = Client()
    client.force_login(user)
    return client


def reads() -> list[str]:
    return [reverse(PAGE), reverse(JSON), detail_url("ip", ATTACKER), reverse(BLOCKS)]


@pytest.fixture
def offender(site_redis: Any) -> Identity:
    """An IP over the "other" policy, and nothing blocked."""
    policies()
    assert hit("/api/other", ATTACKER, times=3)[-1] == 429
    return Identity("ip", ATTACKER)


def unchanged(offender: Identity) -> None:
    assert remaining(offender, "other") == [0]
    assert Controls(get_engine()).override(Identity("ip", QUIET)) is None
    assert not LogEntry.objects.exists()


def both_actions(client: Client, status: int) -> None:
    for fields in (RESET, BLOCK):
        assert client.post(reverse(ACTION), fields).status_code == status
        assert client.post(reverse(ACTION), {**fields, "confirm": "on"}).status_code == status


def test_anonymous_users_go_to_the_login_page(offender: Identity) -> None:
    client = Client()
    for url in [*reads(), reverse(ACTION)]:
        response = client.get(url)
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("admin:login") + "?next=")
    response = client.post(reverse(ACTION), {**RESET, "confirm": "on"})
    assert response.status_code == 302 and response["Location"].startswith(reverse("admin:login"))
    unchanged(offender)


def test_non_staff_and_inactive_users_go_to_the_login_page(
    offender: Identity, django_user_model: Any
) -> None:
    everything = ("view_offenders", "reset_offenders", "block_offenders")
    for client in (
        account(django_user_model, "customer", *everything, staff=False),
        account(django_user_model, "gone", *everything, active=False),
    ):
        for url in reads():
            assert client.get(url)["Location"].startswith(reverse("admin:login"))
        assert client.post(reverse(ACTION), {**RESET, "confirm": "on"}).status_code == 302
    unchanged(offender)


def test_staff_without_the_view_permission_get_403(
    offender: Identity, django_user_model: Any
) -> None:
    # Even with the action permissions: the dashboard needs view_offenders first.
    client = account(
        django_user_model, "clerk", "view_policy", "reset_offenders", "block_offenders"
    )
    for url in reads():
        assert client.get(url).status_code == 403
    both_actions(client, 403)
    unchanged(offender)


def test_nothing_about_offenders_shows_elsewhere_without_the_permission(
    offender: Identity, django_user_model: Any
) -> None:
    client = account(django_user_model, "clerk", "view_policy")
    for url in (
        reverse("admin:index"),
        reverse("admin:app_list", args=["django_ratelimits"]),
        reverse("admin:django_ratelimits_policy_changelist"),
    ):
        page = client.get(url).content.decode()
        assert "offenders-link" not in page and ATTACKER not in page
        assert reverse(ENTRY) not in page
    assert client.get(reverse(ENTRY)).status_code == 403


def test_the_view_permission_alone_leads_to_the_dashboard(
    offender: Identity, django_user_model: Any
) -> None:
    client = account(django_user_model, "watcher", "view_offenders")
    index = client.get(reverse("admin:index")).content.decode()
    assert f'<a href="{reverse(ENTRY)}">Offenders</a>' in index
    entry = client.get(reverse(ENTRY))
    assert entry.status_code == 302 and entry["Location"] == reverse(PAGE)
    # The policies stay out of reach.
    assert client.get(reverse("admin:django_ratelimits_policy_changelist")).status_code == 403


def test_viewing_without_action_permissions(offender: Identity, django_user_model: Any) -> None:
    client = account(django_user_model, "watcher", "view_offenders")
    for url in reads():
        assert client.get(url).status_code == 200
    page = client.get(detail_url("ip", ATTACKER)).content.decode()
    assert 'id="offender-actions"' not in page and "action-reset" not in page
    both_actions(client, 403)
    unchanged(offender)


def test_the_reset_permission_resets_only(offender: Identity, django_user_model: Any) -> None:
    client = account(django_user_model, "resetter", "view_offenders", "reset_offenders")
    page = client.get(detail_url("ip", ATTACKER)).content.decode()
    assert 'id="action-reset"' in page and 'id="action-block"' not in page
    assert client.post(reverse(ACTION), {**BLOCK, "confirm": "on"}).status_code == 403
    assert Controls(get_engine()).override(Identity("ip", QUIET)) is None
    assert client.post(reverse(ACTION), RESET).status_code == 200  # the confirmation
    assert client.post(reverse(ACTION), {**RESET, "confirm": "on"}).status_code == 302
    assert remaining(offender, "other") == [2]


def test_the_block_permission_blocks_only(offender: Identity, django_user_model: Any) -> None:
    client = account(django_user_model, "blocker", "view_offenders", "block_offenders")
    page = client.get(detail_url("ip", ATTACKER)).content.decode()
    assert 'id="action-block"' in page and 'id="action-allow"' in page
    assert 'id="action-reset"' not in page
    assert client.post(reverse(ACTION), {**RESET, "confirm": "on"}).status_code == 403
    assert remaining(offender, "other") == [0]
    assert client.post(reverse(ACTION), {**BLOCK, "confirm": "on"}).status_code == 302
    assert Controls(get_engine()).override(Identity("ip", QUIET)) == ("blocked", 300, 0)
    lift = {"kind": "ip", "value": QUIET, "action": "lift", "confirm": "on"}
    assert client.post(reverse(ACTION), lift).status_code == 302
    assert Controls(get_engine()).override(Identity("ip", QUIET)) is None


def test_a_get_changes_nothing(offender: Identity, admin_client: Client) -> None:
    for fields in (RESET, BLOCK):
        response = admin_client.get(reverse(ACTION), {**fields, "confirm": "on"})
        assert response.status_code == 405
    unchanged(offender)


def test_a_post_without_the_csrf_token_is_rejected(
    offender: Identity, admin_user: Any, django_user_model: Any
) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)
    for fields in (RESET, BLOCK):
        assert client.post(reverse(ACTION), fields).status_code == 403
        assert client.post(reverse(ACTION), {**fields, "confirm": "on"}).status_code == 403
    unchanged(offender)
    # The page's own forms carry the token, so the real flow passes the same check.
    page = client.get(detail_url("ip", ATTACKER)).content.decode()
    token = page.split('name="csrfmiddlewaretoken" value="')[1].split('"')[0]
    confirm = client.post(reverse(ACTION), {**RESET, "csrfmiddlewaretoken": token})
    assert confirm.status_code == 200 and 'name="csrfmiddlewaretoken"' in confirm.content.decode()
    done = client.post(reverse(ACTION), {**RESET, "confirm": "on", "csrfmiddlewaretoken": token})
    assert done.status_code == 302
    assert remaining(offender, "other") == [2]


def test_superusers_may_do_everything(offender: Identity, admin_client: Client) -> None:
    for url in reads():
        assert admin_client.get(url).status_code == 200
    page = admin_client.get(detail_url("ip", ATTACKER)).content.decode()
    for form in ("action-reset", "action-block", "action-allow"):
        assert f'id="{form}"' in page
    assert admin_client.get(reverse(DETAIL)).status_code == 404  # no identity named


def test_forget_cannot_lift_a_block_without_the_block_permission(
    offender: Identity, django_user_model: Any
) -> None:
    # Forget erases the identity's state HASH, its block or allow-listing with it: a
    # reset-only staff user blocked on the site must not end their own block that way.
    Offenders().block(offender, 300)
    client = account(django_user_model, "resetter", "view_offenders", "reset_offenders")
    page = client.get(detail_url("ip", ATTACKER)).content.decode()
    assert 'id="action-reset"' in page and 'id="action-forget"' not in page
    forget = {"kind": "ip", "value": ATTACKER, "action": "forget"}
    assert client.post(reverse(ACTION), forget).status_code == 403
    assert client.post(reverse(ACTION), {**forget, "confirm": "on"}).status_code == 403
    assert Controls(get_engine()).override(offender) is not None
    assert not LogEntry.objects.exists()
    # A reset, even with its record forgotten, leaves the block in force.
    assert client.post(reverse(ACTION), {**RESET, "confirm": "on"}).status_code == 302
    assert Controls(get_engine()).override(offender) is not None


def test_forget_needs_both_permissions(offender: Identity, django_user_model: Any) -> None:
    Offenders().block(offender, 300)
    client = account(
        django_user_model, "eraser", "view_offenders", "reset_offenders", "block_offenders"
    )
    assert 'id="action-forget"' in client.get(detail_url("ip", ATTACKER)).content.decode()
    forget = {"kind": "ip", "value": ATTACKER, "action": "forget", "confirm": "on"}
    assert client.post(reverse(ACTION), forget).status_code == 302
    assert Controls(get_engine()).override(offender) is None


@pytest.mark.parametrize("perms", [("view_offenders",), ("view_offenders", "reset_offenders")])
def test_without_the_block_permission_no_block_is_lifted_or_allow_listed(
    offender: Identity, django_user_model: Any, perms: tuple[str, ...]
) -> None:
    # Staff blocked on the site, who may see the dashboard: their block is listed, with
    # no Lift, and a Lift or an allow-listing of themselves posted by hand is refused.
    Offenders().block(offender, 300)
    client = account(django_user_model, "blocked", *perms)
    page = client.get(reverse(BLOCKS)).content.decode()
    assert ATTACKER in page and "rl-lift" not in page
    detail = client.get(detail_url("ip", ATTACKER)).content.decode()
    assert 'id="action-lift"' not in detail and 'id="action-allow"' not in detail
    for fields in (
        {"kind": "ip", "value": ATTACKER, "action": "lift", "back": "blocks"},
        {"kind": "ip", "value": ATTACKER, "action": "allow", "seconds": "86400"},
    ):
        assert client.post(reverse(ACTION), fields).status_code == 403
        assert client.post(reverse(ACTION), {**fields, "confirm": "on"}).status_code == 403
    still = Controls(get_engine()).override(offender)
    assert still is not None and still.state == "blocked"
    assert not LogEntry.objects.exists()
