"""The Policy model: validation keyed by field, compilation, and the version stamp."""

from __future__ import annotations

import ipaddress
from io import StringIO
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command

from django_ratelimits.engine import Algorithm, Ban
from django_ratelimits.models import Policy, PolicyVersion, spec_fields
from django_ratelimits.policies.spec import KeyKind, Mode, PolicySpec
from django_ratelimits.rates import Rate


def key_for_tests(request: object) -> str:
    return "tenant"


NOT_CALLABLE = 42


def make(**fields: Any) -> Policy:
    values: dict[str, Any] = {"name": "api", "rates": "10/s"}
    values.update(fields)
    return Policy(**values)


def errors_of(policy: Policy) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as caught:
        policy.full_clean(validate_unique=False)
    return caught.value.message_dict


def test_clean_stores_canonical_forms() -> None:
    policy = make(
        rates=" 120/60s ,10/s", methods="post get", allow_cidrs="10.0.0.0/8, 2001:db8::/32\n::1"
    )
    policy.full_clean(validate_unique=False)
    assert policy.rates == "120/m, 10/s"
    assert policy.methods == "GET, POST"
    assert policy.allow_cidrs == "10.0.0.0/8\n2001:db8::/32\n::1/128"


def test_clean_stores_an_ipv4_mapped_network_as_ipv4() -> None:
    # Clients are matched in their IPv4 form; a mapped network would match none.
    policy = make(allow_cidrs="::ffff:10.1.0.0/112, 10.1.0.0/16, ::ffff:192.0.2.1")
    policy.full_clean(validate_unique=False)
    assert policy.allow_cidrs == "10.1.0.0/16\n192.0.2.1/32"


# (fields, the field the error is filed under, a fragment of the message)
INVALID = [
    ({"rates": "10/x"}, "rates", "unknown unit 'x'"),
    ({"rates": "10/s, 20/1s"}, "rates", "repeats the period"),
    ({"rates": ""}, "rates", "This field"),
    ({"burst": 5}, "burst", "Only the token bucket and GCRA have a burst"),
    ({"algorithm": "token_bucket", "burst": 0}, "burst", "between 1 and 1000000"),
    ({"algorithm": "gcra", "rates": "1/30d", "burst": 5000}, "burst", "too large for 1/30d"),
    ({"path": "^/api/(unclosed"}, "path", "(RE2) can run. RE2 says: “missing ): ^/api/(unclosed”."),
    # What only a backtracking matcher runs is refused, with RE2's reason.
    ({"path": r"^/(\w+)/\1$"}, "path", "invalid escape sequence: \\1"),
    ({"path": "^/(?=api)"}, "path", "invalid perl operator: (?="),
    ({"path": "^/(?<!x)a"}, "path", "invalid perl operator: (?<"),
    ({"path": "^/ab(?#x)*"}, "path", "invalid perl operator: (?#"),
    ({"path": r"^/api/\Z"}, "path", "write \\z for the end of the path"),
    # As Django's routes are written: every path starts with "/", so it matches none.
    ({"path": "^api/login/"}, "path", "limits no request. Write ^/api/login/."),
    ({"path": "/" * 501}, "path", "at most 500 characters"),
    ({"methods": "GET, FETCH, post"}, "methods", "Unknown HTTP method: FETCH."),
    ({"allow_cidrs": "10.0.0.0/8\nlocalhost"}, "allow_cidrs", "“localhost” is not an IP"),
    ({"allow_cidrs": "10.0.0.1/8"}, "allow_cidrs", "did you mean 10.0.0.0/8?"),
    ({"allow_cidrs": "1.2.3.4 " * 1001}, "allow_cidrs", "At most 1000 networks."),
    ({"key": "header"}, "key_arg", "Enter the header to count by"),
    ({"key": "header", "key_arg": "X_Api_Key"}, "key_arg", "letters, digits and hyphens"),
    ({"key": "header", "key_arg": "X-Api-Key: 1"}, "key_arg", "letters, digits and hyphens"),
    ({"key": "callable"}, "key_arg", "Enter the dotted path"),
    ({"key": "callable", "key_arg": "nodots"}, "key_arg", "Enter the dotted path"),
    ({"key": "callable", "key_arg": "tests.class.key"}, "key_arg", "Enter the dotted path"),
    ({"key": "callable", "key_arg": "tests.nowhere.key"}, "key_arg", "Cannot import"),
    (
        {"key": "callable", "key_arg": "tests.policies.test_models.missing"},
        "key_arg",
        "Cannot import",
    ),
    (
        {"key": "callable", "key_arg": "tests.policies.test_models.NOT_CALLABLE"},
        "key_arg",
        "not callable",
    ),
    ({"key": "ip", "key_arg": "X-Api-Key"}, "key_arg", "Leave this empty"),
    ({"key": "user", "key_arg": "a.b"}, "key_arg", "Leave this empty"),
    ({"identity_budget": "50 per hour"}, "identity_budget", "Enter one rate such as “50/h”"),
    ({"identity_budget": "50/h, 100/d"}, "identity_budget", "Enter one rate such as “50/h”"),
    ({"identity_budget": "{}\n"}, "identity_budget", "Enter one rate such as “50/h”"),
    ({"name": "not a slug"}, "name", "slug"),
    ({"mode": "loud"}, "mode", "valid choice"),
    # Escalating bans: every value bounded, so no admin value can overflow the
    # check script's numbers or a TTL (docs/bans.md).
    ({"ban_after": 3, "ban_for": "1h"}, "ban_within", "Required when the policy bans"),
    ({"ban_after": 3, "ban_within": "1m"}, "ban_for", "Required when the policy bans"),
    ({"ban_after": 101, "ban_within": "1m", "ban_for": "1h"}, "ban_after", "0 (no ban) to 100"),
    ({"ban_after": 10**12, "ban_within": "1m", "ban_for": "1h"}, "ban_after", "to 100"),
    ({"ban_after": 3, "ban_within": "1m", "ban_for": "1000000000000d"}, "ban_for", "30 days"),
    ({"ban_after": 3, "ban_within": "31d", "ban_for": "1h"}, "ban_within", "30 days"),
    ({"ban_after": 3, "ban_within": "1m", "ban_for": "1h", "ban_max": "31d"}, "ban_max", "30 days"),
    (
        {"ban_after": 3, "ban_within": "1m", "ban_for": "1h", "ban_max": "0h"},
        "ban_max",
        "at least 1",
    ),
    ({"ban_after": 3, "ban_within": "1m", "ban_for": "1h", "ban_max": "30m"}, "ban_max", "shorter"),
    ({"ban_within": "5 fortnights"}, "ban_within", "Enter a duration such as “10m”"),
    ({"ban_for": "1h, 2h"}, "ban_for", "expected the end of the input"),
    ({"ban_max": "9" * 21}, "ban_max", "at most 20 characters"),
    # A member per admitted request and window: memory and one costly request's writes
    # grow with the limit (a cost of a million once held Redis for seconds).
    ({"algorithm": "sliding_log", "rates": "10/s, 20000/h"}, "rates", "at most 10000 per"),
]


@pytest.mark.parametrize(("fields", "field", "fragment"), INVALID)
def test_clean_files_each_error_under_its_field(
    fields: dict[str, Any], field: str, fragment: str
) -> None:
    errors = errors_of(make(**fields))
    assert list(errors) == [field]
    assert fragment in " ".join(errors[field])


def test_a_ban_is_stored_in_canonical_form_and_compiles() -> None:
    policy = make(ban_after=5, ban_within=" 600 s", ban_for="90 min")
    policy.full_clean(validate_unique=False)
    assert (policy.ban_within, policy.ban_for, policy.ban_max) == ("10m", "90m", "90m")
    spec = policy.to_spec()
    assert spec.ban == Ban(5, 600, 5400, 5400)
    assert all(limit.ban == spec.ban for limit in spec.limits)
    assert Policy(**spec_fields(spec)).to_spec() == spec


def test_ban_after_0_is_no_ban_whatever_the_periods() -> None:
    policy = make(ban_after=0, ban_within="1m", ban_for="1h")
    policy.full_clean(validate_unique=False)
    assert policy.to_spec().ban is None


def test_a_shadow_policy_s_limits_carry_no_ban() -> None:
    policy = make(mode="shadow", ban_after=2, ban_within="1m", ban_for="1h")
    spec = policy.to_spec()
    assert spec.ban is not None and all(limit.ban is None for limit in spec.limits)


def test_clean_reports_every_bad_field_at_once() -> None:
    errors = errors_of(make(rates="10", path="(", methods="GOT", key="ip", key_arg="x"))
    assert sorted(errors) == ["key_arg", "methods", "path", "rates"]


def test_valid_keys_and_bursts_pass() -> None:
    for fields in (
        {"key": "header", "key_arg": "X-Api-Key"},
        {"key": "callable", "key_arg": "tests.policies.test_models.key_for_tests"},
        {"algorithm": "token_bucket", "burst": 50, "rates": "10/s, 100/m"},
        {"algorithm": "gcra", "rates": "1/30d", "burst": 1000},
        {"path": r"^/api/v\d+/", "methods": "get,HEAD"},
    ):
        make(**fields).full_clean(validate_unique=False)


def test_an_identity_budget_is_a_rate_off_or_the_default() -> None:
    for written, stored, compiled in (
        ("", "", "default"),
        (" off ", "off", "off"),
        ("20/60m", "20/h", Rate(20, 3600)),
    ):
        policy = make(key="header", key_arg="X-Api-Key", identity_budget=written)
        policy.full_clean(validate_unique=False)
        assert policy.identity_budget == stored
        assert policy.to_spec().identity_budget == compiled


def test_rate_error_quotes_the_parser() -> None:
    [message] = errors_of(make(rates="10/s, 5/x"))["rates"]
    assert message == (
        "Enter rates such as “10/s, 120/m”: invalid rate '10/s, 5/x' at position 8: "
        "unknown unit 'x' (expected s, m, h or d)"
    )


def test_to_spec_compiles_every_field() -> None:
    policy = make(
        name="login",
        description="Slow down password guessing",
        mode="shadow",
        algorithm="gcra",
        rates="5/m, 20/h",
        burst=3,
        key="header",
        key_arg="X-Api-Key",
        path="^/login/",
        methods="POST",
        exempt_staff=True,
        exempt_superusers=True,
        allow_cidrs="10.0.0.0/8",
        fail_closed=True,
        record_metadata="every",
        priority=7,
    )
    spec = policy.to_spec()
    assert spec == PolicySpec(
        name="login",
        rates=(Rate(5, 60), Rate(20, 3600)),
        algorithm=Algorithm.GCRA,
        burst=3,
        mode=Mode.SHADOW,
        key=KeyKind.HEADER,
        key_arg="X-Api-Key",
        path="^/login/",
        methods=frozenset({"POST"}),
        exempt_staff=True,
        exempt_superusers=True,
        allow_cidrs=(ipaddress.ip_network("10.0.0.0/8"),),
        fail_closed=True,
        record_metadata="every",
        priority=7,
        description="Slow down password guessing",
    )
    assert Policy(**spec_fields(spec)).to_spec() == spec


def test_to_spec_rejects_a_broken_row() -> None:
    for fields in ({"rates": "lots"}, {"path": "("}, {"key": "header"}, {"burst": 3}):
        with pytest.raises((ValidationError, ValueError)):
            make(**fields).to_spec()


@pytest.mark.django_db
def test_every_write_changes_the_version_stamp() -> None:
    assert PolicyVersion.current() is None
    seen = set()

    def changed() -> bool:
        stamp = PolicyVersion.current()
        fresh = stamp is not None and stamp not in seen
        seen.add(stamp)
        return fresh

    policy = Policy.objects.create(name="api", rates="10/s")
    assert changed()
    policy.rates = "20/s"
    policy.save()
    assert changed()
    assert Policy.objects.filter(pk=policy.pk).update(enabled=False) == 1
    assert changed()
    assert Policy.objects.filter(name="nothing").update(enabled=False) == 0
    assert not changed()
    Policy.objects.bulk_update([policy], ["priority"])
    assert changed()
    policy.delete()
    assert changed()
    assert PolicyVersion.objects.count() == 1


@pytest.mark.django_db
def test_version_row_comes_back_after_a_flush() -> None:
    Policy.objects.create(name="api", rates="10/s")
    PolicyVersion.objects.all().delete()
    Policy.objects.create(name="web", rates="10/s")
    assert PolicyVersion.current() is not None


def test_offender_permissions_are_declared() -> None:
    codenames = [codename for codename, _ in Policy._meta.permissions]
    assert codenames == ["view_offenders", "reset_offenders", "block_offenders"]


@pytest.mark.django_db
def test_migrations_match_the_models() -> None:
    out = StringIO()
    call_command("makemigrations", "django_ratelimits", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()


def test_a_sliding_log_takes_up_to_ten_thousand_a_window_and_other_algorithms_more() -> None:
    make(algorithm="sliding_log", rates="10000/h, 100/s").full_clean(validate_unique=False)
    make(algorithm="sliding_window", rates="1000000/h").full_clean(validate_unique=False)
