"""A concurrency policy as admin edits it: its rates syntax ("5", "5/concurrent"), its
lease, their form errors, and what it compiles to."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse

from django_ratelimits.admin import describe
from django_ratelimits.decorators import ratelimit
from django_ratelimits.engine import Algorithm
from django_ratelimits.models import Policy, spec_fields
from django_ratelimits.policies import get_registry
from django_ratelimits.policies.spec import PolicySpec
from django_ratelimits.rates import Rate
from tests.dashboard.test_admin import NO_TIERS


def make(**fields: Any) -> Policy:
    values: dict[str, Any] = {"name": "uploads", "algorithm": "concurrency", "rates": "5"}
    values.update(fields)
    return Policy(**values)


def errors_of(policy: Policy) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as caught:
        policy.full_clean(validate_unique=False)
    return caught.value.message_dict


@pytest.mark.parametrize("text", ["5", " 5 ", "5/concurrent", "5 / concurrent"])
def test_rates_are_a_count_of_requests_in_flight(text: str) -> None:
    policy = make(rates=text)
    policy.full_clean(validate_unique=False)
    assert policy.rates == "5/concurrent"
    spec = policy.to_spec()
    assert spec.rates == (Rate(5, 60),), "the lease defaults to 60 s"
    assert spec.limits[0].algorithm is Algorithm.CONCURRENCY


@pytest.mark.parametrize(
    "text",
    ["0", "-1", "5/s", "10/s, 5", "5/concurrently", "1000001", "\u0665", "5.5", "five", "5/", "/5"],
)
def test_nonsense_rates_are_a_form_error(text: str) -> None:
    errors = errors_of(make(rates=text))
    assert list(errors) == ["rates"]
    assert "in flight at once" in errors["rates"][0]


def test_the_lease_is_set_validated_and_only_for_concurrency() -> None:
    policy = make(lease=2)
    policy.full_clean(validate_unique=False)
    assert policy.to_spec().rates == (Rate(5, 2),)
    for bad in (0, 86_401):
        assert list(errors_of(make(lease=bad))) == ["lease"]
    unused = errors_of(make(algorithm="sliding_window", rates="10/s", lease=30))
    assert list(unused) == ["lease"]


def test_a_concurrency_policy_has_no_burst() -> None:
    assert list(errors_of(make(burst=3))) == ["burst"]


def test_spec_fields_round_trip() -> None:
    spec = make(lease=45).to_spec()
    fields = spec_fields(spec)
    assert (fields["rates"], fields["lease"]) == ("5/concurrent", 45)
    assert Policy(**fields).to_spec() == spec
    assert spec_fields(PolicySpec("api", (Rate(1, 1),)))["lease"] is None


def test_a_spec_takes_exactly_one_rate() -> None:
    with pytest.raises(ValueError, match="one rate"):
        PolicySpec("uploads", (Rate(5, 60), Rate(9, 3600)), Algorithm.CONCURRENCY)


def test_the_preview_says_how_many_at_once_and_the_lease() -> None:
    policy = make(lease=120)
    assert describe(policy.to_spec())[0] == (
        "At most 5 requests in flight at once per client IP, each holding its slot "
        "until its response ends, at most 2 minutes."
    )


def test_the_decorator_declares_a_concurrency_policy() -> None:
    ratelimit("t-cc-declared", rate="3", algorithm="concurrency", lease=10)
    spec = get_registry().get("t-cc-declared")
    assert spec is not None and spec.rates == (Rate(3, 10),)


@pytest.mark.django_db
def test_the_admin_form_offers_the_algorithm_and_shows_errors(admin_client: Client) -> None:
    url = reverse("admin:django_ratelimits_policy_add")
    page = admin_client.get(url).content.decode()
    assert 'value="concurrency"' in page and 'name="lease"' in page
    data = {
        "name": "uploads",
        "enabled": "on",
        "mode": "enforce",
        "algorithm": "concurrency",
        "rates": "5/m",
        "lease": "0",
        "priority": "0",
        "key": "ip",
        "record_metadata": "denials",
        "counts": "requests",
        "cost": "1",
        "ban_after": "0",
        **NO_TIERS,
    }
    refused = admin_client.post(url, data)
    assert refused.status_code == 200
    assert refused.content.decode().count('class="errorlist') >= 2  # rates and lease
    # By name: a policy some view module declared may be written on any refresh.
    assert not Policy.objects.filter(name="uploads").exists()
    saved = admin_client.post(url, {**data, "rates": "5", "lease": "30"})
    assert saved.status_code == 302
    assert Policy.objects.get(name="uploads").rates == "5/concurrent"
