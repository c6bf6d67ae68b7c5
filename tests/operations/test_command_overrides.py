"""``manage.py ratelimits override | overrides | unoverride`` against the database and a site."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import CommandError
from django.test import Client

from django_ratelimits.models import Policy, RateOverride
from django_ratelimits.policies import get_registry
from tests.operations.test_command import run, run_json

pytestmark = pytest.mark.django_db


def test_an_override_from_the_terminal_applies_lists_and_ends(site_redis: Any) -> None:
    Policy.objects.create(name="api", rates="2/h", path="^/api/", algorithm="fixed_window")
    made = run_json("override", "ip:127.0.0.1", "api", "5/h", "--for", "1d", "--reason", "demo")
    assert (made["identity"], made["policy"], made["rates"]) == ("ip:127.0.0.1", "api", "5/h")
    assert made["reason"].startswith("demo (")
    get_registry().refresh()
    assert Client().get("/api/hello")["RateLimit-Policy"] == '"api";q=5;w=3600'
    listed = run_json("overrides")["overrides"]
    assert [o["identity"] for o in listed] == ["ip:127.0.0.1"]
    assert "ip:127.0.0.1" in run("overrides")
    assert run_json("unoverride", "ip:127.0.0.1")["ended"] == 1
    get_registry().refresh()
    assert Client().get("/api/hello")["RateLimit-Policy"] == '"api";q=2;w=3600'
    assert run_json("overrides")["overrides"] == []


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("ip:127.0.0.1", "nope", "5/h"), "no rate-limit policy is named 'nope'"),
        (("ip:127.0.0.1", "api", "5/x"), "unknown unit"),
        (("ip:127.0.0.1", "api", "2000000/s"), "between 1 and 1000000"),
        (("ip:bogus", "api", "5/h"), "not an IP address"),
        (("header:k", "api", "5/h"), "counts IP, never Header"),
    ],
)
def test_a_wrong_override_exits_with_the_reason(args: tuple[str, ...], error: str) -> None:
    Policy.objects.create(name="api", rates="2/h", key="ip")
    with pytest.raises(CommandError, match=error):
        run("override", *args, "--for", "1h", "--reason", "x")
    assert not RateOverride.objects.exists()


def test_every_policy_is_a_star() -> None:
    Policy.objects.create(name="api", rates="2/h")
    Policy.objects.create(name="keys", rates="2/h", key="header", key_arg="X-Api-Key")
    run("override", "header:partner", "*", "50/s", "--for", "7d", "--reason", "partner")
    assert RateOverride.objects.get().policy is None
    assert run_json("unoverride", "header:partner", "api")["ended"] == 0
    assert run_json("unoverride", "header:partner", "*")["ended"] == 1


def test_an_override_for_every_policy_of_a_kind_none_counts_is_refused() -> None:
    Policy.objects.create(name="api", rates="2/h")  # counts addresses only
    with pytest.raises(
        CommandError, match="No enabled policy counts the requests of Header identities"
    ):
        run("override", "header:partner", "*", "50/s", "--for", "7d", "--reason", "partner")
    assert not RateOverride.objects.exists()


def test_a_policy_a_view_declares_takes_an_override_before_its_row_is_written() -> None:
    """tests.urls declares t-login with @ratelimit(rate=...): the site enforces it before
    any worker has written its row, and the command (which imports the URLconf so that
    such policies are known to it as to the site) gives it an override then too, writing
    the row a worker's next refresh would write."""
    assert not Policy.objects.filter(name="t-login").exists()
    made = run_json("override", "ip:127.0.0.1", "t-login", "9/m", "--for", "1h", "--reason", "x")
    assert (made["policy"], made["rates"]) == ("t-login", "9/m")
    row = Policy.objects.get(name="t-login")
    assert (row.rates, row.key, row.methods) == ("3/m", "ip", "POST")
    assert RateOverride.objects.get().policy == row
    assert run_json("unoverride", "ip:127.0.0.1", "t-login")["ended"] == 1


def test_overrides_says_a_deleted_users_override_is_not_in_force(
    django_user_model: Any, django_assert_max_num_queries: Any
) -> None:
    """`overrides` listed a deleted user's override as one "in force", as admin did: no
    request can match it, since nothing authenticates as that user."""
    from tests.overrides_helpers import override

    Policy.objects.create(name="api", rates="2/h", key="user")
    spam = django_user_model.objects.create_user("spam", password="x")
    bob = django_user_model.objects.create_user("bob", password="x")
    pk = spam.pk
    override(f"user:{pk}", "5/h", policy=None)
    override(f"user:{bob.pk}", "5/h", policy=None)
    spam.delete()
    with django_assert_max_num_queries(2):  # the overrides, then their users at once
        listed = run_json("overrides")["overrides"]
    in_force = {o["identity"]: o["in_force"] for o in listed}
    assert in_force == {f"user:{pk}": False, f"user:{bob.pk}": True}
    lines = run("overrides").splitlines()
    assert lines[0].split() == ["identity", "policy", "rates", "in", "force", "expires", "reason"]
    gone = next(line for line in lines if line.startswith(f"user:{pk} "))
    assert gone.startswith(f"user:{pk} (no longer exists)") and " no " in gone
    kept = next(line for line in lines if line.startswith(f"user:{bob.pk} "))
    assert " yes " in kept and "no longer exists" not in kept
    # Still ended as the deleted user's id, and then no longer listed.
    assert run_json("unoverride", f"user:{pk}")["ended"] == 1
    assert [o["identity"] for o in run_json("overrides")["overrides"]] == [f"user:{bob.pk}"]
