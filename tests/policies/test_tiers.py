"""Tiers and identity overrides without requests: what admin accepts, what compiles."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.utils import timezone

from django_ratelimits.engine import Identity
from django_ratelimits.models import Policy, PolicyTier, RateOverride
from django_ratelimits.policies.rate_overrides import OverrideTable, OwnRates
from django_ratelimits.policies.spec import Counts, KeyKind, PolicySpec
from django_ratelimits.policies.tiers import Tier, parse_attribute_path, read_attribute
from django_ratelimits.rates import MAX_LIMIT, parse_rates

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "text",
    [
        "__class__",
        "profile.__dict__",
        "_meta",
        "profile._state",
        "a.b.c.d.e",
        "plan()",
        "",
        "a..b",
        "Profile",
    ],
)
def test_an_attribute_path_is_plain_names_only(text: str) -> None:
    with pytest.raises(ValueError):
        parse_attribute_path(text)


def test_reading_an_attribute_never_calls_what_it_finds() -> None:
    called = []

    class Plan:
        def upgrade(self) -> str:
            called.append(True)
            return "pro"

    class User:
        plan = Plan()
        level = "pro"

    assert read_attribute(User(), ("plan", "upgrade")) is None
    assert read_attribute(User(), ("missing", "level")) is None
    assert read_attribute(User(), ("level",)) == "pro"
    assert called == []


def test_a_tier_form_refuses_bad_rates_unknown_groups_and_unsafe_paths() -> None:
    policy = Policy.objects.create(name="api", rates="2/h")
    Group.objects.create(name="pro")
    PolicyTier(policy=policy, match="group", name="pro", rates="5/h").full_clean()
    cases = [
        ({"match": "group", "name": "pro", "rates": "5/x"}, "rates"),
        ({"match": "group", "name": "no-such-group", "rates": "5/h"}, "name"),
        ({"match": "attribute", "name": "__class__.__name__", "rates": "5/h"}, "name"),
    ]
    for fields, field in cases:
        with pytest.raises(ValidationError) as raised:
            PolicyTier(policy=policy, **fields).full_clean()
        assert field in raised.value.message_dict


def test_an_override_rate_is_bounded_like_a_policy_rate() -> None:
    policy = Policy.objects.create(name="api", rates="2/h")
    row = RateOverride(
        policy=policy,
        identity_kind="ip",
        identity_value="203.0.113.7",
        rates=f"{MAX_LIMIT + 1}/s",
        expires_at=timezone.now() + timedelta(days=1),
        reason="huge",
    )
    with pytest.raises(ValidationError) as raised:
        row.full_clean()
    assert "rates" in raised.value.message_dict
    row.rates = f"{MAX_LIMIT}/s"
    row.full_clean()


def test_an_override_for_a_kind_the_policy_never_counts_is_refused() -> None:
    policy = Policy.objects.create(name="api", rates="2/h", key="ip")
    row = RateOverride(
        policy=policy,
        identity_kind="user",
        identity_value="1",
        rates="5/h",
        expires_at=timezone.now() + timedelta(days=1),
        reason="wrong kind",
    )
    with pytest.raises(ValidationError) as raised:
        row.full_clean()
    assert "policy" in raised.value.message_dict


def test_one_policy_overrides_beat_every_policy_ones_and_kinds_must_be_counted() -> None:
    by_ip = PolicySpec("by-ip", parse_rates("2/h"))
    by_user = PolicySpec("by-user", parse_rates("2/h"), key=KeyKind.USER)
    ip = Identity("ip", "203.0.113.7")
    table = OverrideTable(
        [
            OwnRates(ip, parse_rates("9/h"), 100.0, "by-ip"),
            OwnRates(ip, parse_rates("5/h"), 100.0),
        ],
        [by_ip, by_user],
    )
    found = table.limits("by-ip", ip, 50.0)
    assert found is not None and [str(lim.rate) for lim in found] == ["9/h"]
    assert table.limits("by-user", ip, 50.0) is None  # by-user never counts an IP
    assert table.limits("by-ip", ip, 100.0) is None  # expired
    assert len(table) == 1


def test_an_override_for_every_policy_leaves_failed_login_policies_alone() -> None:
    """Raising a partner address's rates for every policy must not lift its login
    lockout (an operator review): an override names a failed-login policy to reach it."""
    api = PolicySpec("api", parse_rates("10/h"))
    logins = PolicySpec("logins", parse_rates("3/15m"), counts=Counts.FAILED_LOGINS)
    ip = Identity("ip", "203.0.113.7")
    every = OwnRates(ip, parse_rates("10000/h"), 100.0)
    table = OverrideTable([every], [api, logins])
    assert table.limits("logins", ip, 50.0) is None
    assert table.limits("api", ip, 50.0) is not None
    named = OverrideTable([OwnRates(ip, parse_rates("5/15m"), 100.0, "logins")], [logins])
    assert named.limits("logins", ip, 50.0) is not None


def test_an_override_for_every_policy_needs_a_policy_counting_requests() -> None:
    Policy.objects.create(name="logins", rates="3/15m", key="ip", counts="failed_logins")
    row = RateOverride(
        identity_kind="ip",
        identity_value="203.0.113.7",
        rates="10000/h",
        expires_at=timezone.now() + timedelta(days=1),
        reason="partner",
    )
    with pytest.raises(ValidationError) as raised:
        row.full_clean()
    assert "failed-login" in str(raised.value.message_dict["policy"])
    Policy.objects.create(name="api", rates="10/h", key="ip")
    row.full_clean()


def test_an_override_that_ends_first_gives_way_to_the_one_it_hid() -> None:
    api = PolicySpec("api", parse_rates("2/h"))
    ip = Identity("ip", "203.0.113.8")
    table = OverrideTable(
        [
            OwnRates(ip, parse_rates("5/h"), 2000.0),  # every policy, until 2000
            OwnRates(ip, parse_rates("9/h"), 1000.0, "api"),  # api only, until 1000
            OwnRates(ip, parse_rates("7/h"), 1500.0, "api"),  # api only, newer
        ],
        [api],
    )

    def rates(now: float) -> list[str] | None:
        found = table.limits("api", ip, now)
        return None if found is None else [str(lim.rate) for lim in found]

    assert rates(900.0) == ["7/h"]  # the newest one-policy override
    assert rates(1200.0) == ["7/h"]
    assert rates(1600.0) == ["5/h"]  # both one-policy ones ended: the every-policy one
    assert rates(2000.0) is None


def test_a_tier_is_a_group_or_an_attribute() -> None:
    with pytest.raises(ValueError):
        Tier(parse_rates("5/h"), group="pro", attribute=("plan",), value="pro")
    with pytest.raises(ValueError):
        Tier(parse_rates("5/h"))


def test_a_tier_whose_group_is_gone_is_a_warning_naming_both() -> None:
    from django.core.checks import run_checks

    from django_ratelimits.checks import TAG

    policy = Policy.objects.create(name="api", rates="2/h")
    pro = Group.objects.create(name="pro")
    PolicyTier.objects.create(policy=policy, match="group", name="pro", rates="5/h")
    assert not [m for m in run_checks(tags=[TAG]) if m.id == "django_ratelimits.W011"]
    pro.delete()
    found = [m for m in run_checks(tags=[TAG]) if m.id == "django_ratelimits.W011"]
    assert len(found) == 1 and "'api'" in found[0].msg and "'pro'" in found[0].msg


@pytest.mark.django_db
def test_a_bulk_update_of_tiers_or_overrides_changes_the_version_stamp() -> None:
    # update() sends no post_save: without the stamp, workers would never reload them.
    from django.contrib.auth.models import Group

    from django_ratelimits.models import Policy, PolicyTier, PolicyVersion, RateOverride
    from tests.overrides_helpers import override

    policy = Policy.objects.create(name="api", rates="2/h", path="^/api/")
    PolicyTier.objects.create(
        policy=policy, match="group", name=Group.objects.create(name="pro").name, rates="5/h"
    )
    override("ip:10.0.0.7", "4/h", policy=policy)
    for rows in (PolicyTier.objects.all(), RateOverride.objects.all()):
        stamp = PolicyVersion.current()
        assert rows.update(rates="9/h") == 1
        assert PolicyVersion.current() != stamp, rows.model


def test_a_concurrency_policy_s_tiers_and_overrides_are_slots() -> None:
    from django_ratelimits.engine import Algorithm
    from django_ratelimits.policies.registry import PolicyRegistry

    Group.objects.create(name="pro")
    uploads = Policy.objects.create(name="uploads", algorithm="concurrency", rates="2", lease=30)
    api = Policy.objects.create(name="api", rates="10/h")
    # Rates over time are not slots: a tier or an override says how many, as the policy does.
    with pytest.raises(ValidationError) as raised:
        PolicyTier(policy=uploads, match="group", name="pro", rates="10/s, 100/h").full_clean()
    assert "rates" in raised.value.message_dict
    tier = PolicyTier(policy=uploads, match="group", name="pro", rates="5")
    tier.full_clean()
    tier.save()
    assert tier.rates == "5/concurrent"
    ip, later = "203.0.113.9", timezone.now() + timedelta(days=1)
    RateOverride.objects.create(
        policy=uploads, identity_kind="ip", identity_value=ip, rates="8", expires_at=later
    )
    RateOverride.objects.create(  # every policy: spares the concurrency one
        identity_kind="ip", identity_value="203.0.113.10", rates="1000/h", expires_at=later
    )
    registry = PolicyRegistry()
    registry.refresh()
    spec = registry.get("uploads")
    assert spec is not None and spec.algorithm is Algorithm.CONCURRENCY
    assert [(t.rates[0].limit, t.rates[0].period) for t in spec.tiers] == [(5, 30)]
    own = registry.own_limits("uploads", Identity("ip", ip))
    assert own is not None and [(lim.rate.limit, lim.rate.period) for lim in own] == [(8, 30)]
    assert registry.own_limits("uploads", Identity("ip", "203.0.113.10")) is None
    assert registry.own_limits(api.name, Identity("ip", "203.0.113.10")) is not None


def test_a_sliding_log_policy_s_tiers_and_overrides_are_bounded_like_it() -> None:
    """A tier or an override is the policy's algorithm at other rates: a sliding log's
    holds a member per admitted request too, so it takes at most 10,000 a window."""
    policy = Policy.objects.create(name="log", rates="10/h", algorithm="sliding_log")
    Group.objects.create(name="pro")
    tier = PolicyTier(policy=policy, match="group", name="pro", rates="20000/h")
    override = RateOverride(
        policy=policy,
        identity_kind="ip",
        identity_value="203.0.113.7",
        rates="20000/h",
        expires_at=timezone.now() + timedelta(days=1),
        reason="load test",
    )
    for row in (tier, override):
        with pytest.raises(ValidationError) as raised:
            row.full_clean()
        assert "at most 10000 per window" in " ".join(raised.value.message_dict["rates"])
        row.rates = "10000/h"
        row.full_clean()
