"""W012: an IP override stored in a form the settings no longer count never applies.

An override row keeps the IP as it was counted when it was saved (``203.0.113.5``,
``203.0.113.0/24`` or ``h:`` and a hash). Turning ``HASH_IPS`` on or off, or changing
``IPV4_PREFIX`` / ``IPV6_PREFIX``, makes the limiter count another value: the row
would read "in force" in admin and match no request again. The check names it, and
admin's list shows it not in force.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.core.checks import CheckMessage, run_checks
from django.test import Client, override_settings
from django.urls import reverse
from django.utils import timezone

from django_ratelimits.checks import TAG
from django_ratelimits.engine import get_engine
from django_ratelimits.models import Policy, RateOverride
from django_ratelimits.offenders.identities import parse
from django_ratelimits.policies import get_registry
from django_ratelimits.testing import FakeClock
from tests.engine_helpers import EPOCH_US
from tests.overrides_helpers import override

pytestmark = pytest.mark.django_db

ADDRESS = "203.0.113.5"
W012 = "django_ratelimits.W012"


def configured(**changes: object) -> Any:
    return override_settings(DJANGO_RATELIMITS={**settings.DJANGO_RATELIMITS, **changes})


def w012() -> list[CheckMessage]:
    return [m for m in run_checks(tags=[TAG]) if m.id == W012]


def saved_as_counted(ident: str, policy: Policy | None) -> None:
    """The override of ``ident`` as admin saves it: the value the limiter counts now."""
    identity = parse(ident)
    override(f"{identity.kind}:{identity.value}", "1/m", policy=policy)


def statuses(n: int) -> list[int]:
    client = Client(REMOTE_ADDR=ADDRESS)
    return [client.get("/api/hello").status_code for _ in range(n)]


CHANGES = {
    "hash_ips_on": ({}, {"HASH_IPS": True}),
    "hash_ips_off": ({"HASH_IPS": True}, {}),
    "ipv4_prefix": ({}, {"IPV4_PREFIX": 24}),
    "ipv4_prefix_back": ({"IPV4_PREFIX": 24}, {}),
}


@pytest.mark.parametrize(("before", "after"), list(CHANGES.values()), ids=list(CHANGES))
def test_an_ip_override_the_settings_no_longer_count_is_warning_w012(
    site_redis: Any,
    monkeypatch: pytest.MonkeyPatch,
    before: dict[str, object],
    after: dict[str, object],
) -> None:
    api = Policy.objects.create(name="api", rates="5/m", key="ip", path="^/api/hello")
    with configured(**before):
        saved_as_counted(f"ip:{ADDRESS}", api)
        get_registry().refresh()
        monkeypatch.setattr(get_engine(), "clock", FakeClock(EPOCH_US))
        assert statuses(2) == [200, 429], "the override applies under the settings it was saved"
        assert w012() == []
    with configured(**after):
        get_registry().refresh()
        monkeypatch.setattr(get_engine(), "clock", FakeClock(EPOCH_US + 120_000_000))
        assert statuses(2) == [200, 200], "the limiter counts another value: it cannot match"
        (found,) = w012()
    row = RateOverride.objects.get()
    assert found.obj == row and f"override of {row} under 'api'" in found.msg
    assert "HASH_IPS" in found.msg and "admin" in (found.hint or "")


def test_overrides_in_the_counted_form_or_expired_or_of_no_ip_are_quiet() -> None:
    api = Policy.objects.create(name="api", rates="5/m", key="ip_and_user")
    with configured(HASH_IPS=True, IPV4_PREFIX=24):
        for ident in (f"ip:{ADDRESS}", "ip:2001:db8::7", "ip:unknown", f"ip_username:{ADDRESS} a"):
            saved_as_counted(ident, api)
        override("user:1", "1/m", policy=api)  # a user is counted as it was: never stale
        override(f"ip:{ADDRESS}", "1/m", policy=api, until=timezone.now() - timedelta(hours=1))
        assert w012() == []


def test_admin_shows_an_override_the_settings_no_longer_count_not_in_force(
    admin_client: Client,
) -> None:
    override(f"ip:{ADDRESS}", "1/m", policy=None)
    url = reverse("admin:django_ratelimits_rateoverride_changelist")
    assert 'alt="True"' in admin_client.get(url).content.decode()
    with configured(HASH_IPS=True):
        page = admin_client.get(url).content.decode()
    assert 'alt="False"' in page and 'alt="True"' not in page
