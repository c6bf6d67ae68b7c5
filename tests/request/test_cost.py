"""A request that costs more than 1: a policy's cost, and a cost function's answer."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.http import HttpRequest
from django.test import Client, override_settings
from redis.cluster import RedisCluster

from django_ratelimits import costs
from django_ratelimits.decorators import ratelimit
from django_ratelimits.engine import Algorithm, Check, Identity, Limit
from django_ratelimits.models import Policy, spec_fields
from django_ratelimits.policies import get_registry
from django_ratelimits.policies.spec import MAX_COST
from django_ratelimits.rates import parse_rate
from django_ratelimits.testing import FakeClock
from tests import cost_urls
from tests.engine_helpers import check_calls, fresh_engine

pytestmark = pytest.mark.django_db


@pytest.fixture
def site(site_redis: Any) -> Any:
    """The ``site_redis`` site serving ``tests.cost_urls``."""
    with override_settings(ROOT_URLCONF=cost_urls.__name__):
        yield site_redis


@pytest.fixture
def clock(site: Any, frozen_clock: FakeClock) -> FakeClock:
    """That site's engine on a clock stopped at the start of an hour."""
    return frozen_clock


def remaining(response: Any) -> str:
    """The ``r=`` of the response's RateLimit field (what is left of the headline limit)."""
    return str(response["RateLimit"]).split(";")[1]


def test_a_cost_of_5_on_10_an_hour_refuses_the_third_request(clock: FakeClock) -> None:
    client = Client()
    first, second, third = (client.get("/cost/report") for _ in range(3))
    assert [first.status_code, second.status_code, third.status_code] == [200, 200, 429]
    assert first["RateLimit"] == '"c-report";r=5;t=3600'
    assert remaining(second) == "r=0"
    assert third["RateLimit"] == '"c-report";r=0;t=3600'
    clock.advance(3600)  # the next hour: the budget is back
    assert client.get("/cost/report").status_code == 200


def test_the_cost_in_admin_wins_over_the_decorator_default(clock: FakeClock) -> None:
    declared = get_registry().get("c-report")
    assert declared is not None and spec_fields(declared)["cost"] == 5  # its row's cost
    Policy.objects.create(**{**spec_fields(declared), "cost": 2})  # as admin edits it
    get_registry().refresh()
    client = Client()
    assert [remaining(client.get("/cost/report")) for _ in range(2)] == ["r=8", "r=6"]


def test_a_cost_function_charges_what_it_returns(clock: FakeClock) -> None:
    client = Client()
    assert remaining(client.get("/cost/search?cost=3")) == "r=7"
    assert remaining(client.get("/cost/search?cost=6")) == "r=1"
    # 2 more would take the budget below 0: refused, and charged nothing.
    assert client.get("/cost/search?cost=2").status_code == 429
    assert remaining(client.get("/cost/search?cost=1")) == "r=0"


def test_an_async_view_charges_its_cost_function_too(clock: FakeClock) -> None:
    client = Client()
    assert remaining(client.get("/cost/async?cost=4")) == "r=6"
    assert client.get("/cost/async?cost=7").status_code == 429


@pytest.mark.parametrize("answer", ["2.5", "null", "true", '"3"', "-1", "[5]", "raise"])
def test_a_bad_answer_costs_the_policy_cost_and_is_logged_once(
    clock: FakeClock, answer: str, caplog: pytest.LogCaptureFixture
) -> None:
    costs._reported.discard("c-search")
    client = Client()
    with caplog.at_level(logging.ERROR, logger="django_ratelimits"):
        statuses = [client.get(f"/cost/search?cost={answer}").status_code for _ in range(11)]
    # Never a 500 and never free: each costs the policy's cost, 1 of 10 an hour.
    assert statuses == [200] * 10 + [429]
    [line] = [r.getMessage() for r in caplog.records if "cost function" in r.getMessage()]
    assert "'c-search'" in line and "the policy's cost (1)" in line


def test_a_cost_above_the_limit_takes_the_whole_budget_and_never_gets_through_cheaper(
    clock: FakeClock,
) -> None:
    client = Client()
    huge = 10**30
    # A fresh budget: the request passes, spending all of it (it is charged 10, not 1).
    assert remaining(client.get(f"/cost/search?cost={huge}")) == "r=0"
    assert client.get("/cost/search?cost=1").status_code == 429
    clock.advance(3600)
    client.get("/cost/search?cost=1")  # a budget partly spent: the costly request is refused
    assert client.get(f"/cost/search?cost={MAX_COST}").status_code == 429
    assert remaining(client.get("/cost/search?cost=9")) == "r=0"


def test_a_cost_of_0_is_free_under_the_policy(clock: FakeClock, site: Any) -> None:
    client = Client()
    client.get("/cost/search?cost=10")
    assert client.get("/cost/search?cost=1").status_code == 429
    cluster = isinstance(site, RedisCluster)
    before = 0 if cluster else check_calls(site)
    response = client.get("/cost/search?cost=0")
    assert response.status_code == 200 and "RateLimit" not in response
    if not cluster:  # nothing to check: no round trip
        assert check_calls(site) == before


def test_a_path_policy_and_a_costly_view_are_one_check_all_or_nothing(clock: FakeClock) -> None:
    Policy.objects.create(name="c-site", rates="3/h", path="^/cost/", algorithm="fixed_window")
    get_registry().refresh()
    client = Client()
    assert client.get("/cost/report").status_code == 200  # c-report 5 of 10, c-site 1 of 3
    assert client.get("/cost/report").status_code == 200  # c-report 10 of 10, c-site 2 of 3
    # c-report denies: c-site, in the same check, is not charged either.
    assert client.get("/cost/report").status_code == 429
    assert client.get("/cost/search?cost=1").status_code == 200  # c-site 3 of 3
    assert client.get("/cost/search?cost=1").status_code == 429  # c-site is spent


@pytest.mark.parametrize("redis_client", ["standalone"], indirect=True)
def test_one_round_trip_whatever_the_costs(site: Any) -> None:
    Policy.objects.create(name="c-site", rates="100/h", path="^/cost/")
    get_registry().refresh()
    client = Client()
    client.get("/cost/search?cost=3")
    before = check_calls(site)
    assert client.get("/cost/search?cost=2").status_code == 200
    assert check_calls(site) - before == 1


def test_the_default_cost_leaves_the_scripts_arguments_as_they_were(site_redis: Any) -> None:
    """A policy's cost of 1 sends what was sent before costs existed (no cost per limit)."""
    engine = fresh_engine(site_redis)
    limit = Limit("api", parse_rate("10/m"))
    [call] = engine._plan([Check(Identity("ip", "192.0.2.1"), (limit,))], "c", 1)
    # The group's flags (enforced, decided by overrides, no hit entry, refusing), then
    # its limits.
    assert b"eonr" + limit.framed_spec in call.args
    [costly] = engine._plan([Check(Identity("ip", "192.0.2.1"), (limit,), costs=(3,))], "c", 1)
    assert b"eonr%d*3:%s" % (len(limit.encoded_spec), limit.encoded_spec) in costly.args


@pytest.mark.parametrize("where", ["/cost/gcra", "/cost/tb"])
def test_a_cost_above_a_buckets_burst_takes_the_whole_window_not_the_burst(
    clock: FakeClock, where: str
) -> None:
    # 10/h with a burst of 2: a request the cost function prices at 10 (the whole hour)
    # passes when the bucket is full and leaves it in debt. Charged the burst alone, it
    # passed every 12 minutes: 5 an hour.
    client = Client()
    passed = []
    for _ in range(10):  # 2 hours, in steps of 12 minutes
        passed.append(client.get(f"{where}?cost=10").status_code == 200)
        clock.advance(720)
    assert passed == [True, False, False, False, False] * 2
    # In debt, even the cheapest request waits for the bucket to refill to one.
    assert client.get(f"{where}?cost=10").status_code == 200
    assert client.get(f"{where}?cost=1").status_code == 429
    clock.advance(3600 - 720)  # 8 of the 10 have refilled: the bucket holds 0
    assert client.get(f"{where}?cost=1").status_code == 429
    clock.advance(360)  # and 1 after 6 more minutes
    assert client.get(f"{where}?cost=1").status_code == 200


def test_the_engine_refuses_a_cost_no_limit_can_hold(site_redis: Any) -> None:
    engine = fresh_engine(site_redis)
    limit = Limit("api", parse_rate("10/m"))
    ip = Identity("ip", "192.0.2.1")
    with pytest.raises(ValueError, match="could never pass"):
        engine.check([Check(ip, (limit,), costs=(11,))])
    bucket = Limit("api", parse_rate("10/m"), Algorithm.GCRA, burst=2)
    assert engine.check([Check(ip, (bucket,), costs=(10,))]).allowed  # in debt, not more
    with pytest.raises(ValueError, match="could never pass"):
        engine.check([Check(ip, (bucket,), costs=(11,))])
    with pytest.raises(ValueError, match="at least 1"):
        engine.check([Check(ip, (limit,), costs=(0,))])
    with pytest.raises(ValueError):
        engine.check([Check(ip, (limit,), costs=(1, 1))])


def test_limits_of_one_check_charge_their_own_costs_all_or_nothing(site_redis: Any) -> None:
    engine = fresh_engine(site_redis, FakeClock(1_800_000_000_000_000))
    ip = Identity("ip", "192.0.2.1")
    small, large = Limit("small", parse_rate("4/h")), Limit("large", parse_rate("100/h"))
    check = Check(ip, (small, large), costs=(2, 30))
    first = engine.check([check])
    assert [r.remaining for r in first.results] == [2, 70]
    engine.check([check])
    denied = engine.check([check])  # small has 0 left: large is not charged either
    assert [r.allowed for r in denied.results] == [False, True]
    assert [r.remaining for r in engine.peek([Check(ip, (small, large))]).results] == [0, 40]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rate": "10/h", "cost": 11}, "could never pass 10/h"),
        ({"rate": "10/h", "cost": 0}, "from 1 to 1000000"),
        ({"rate": "10/h", "cost": True}, "from 1 to 1000000"),
        ({"cost": 3}, "without rate="),
    ],
)
def test_the_decorator_refuses_a_bad_cost_when_the_code_runs(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        ratelimit("c-bad", **kwargs)


def test_a_policy_has_one_cost_function() -> None:
    def other(request: HttpRequest) -> int:
        return 1

    with pytest.raises(ValueError, match="already has the cost function cost_from_query"):
        ratelimit("c-search", cost=other)
    ratelimit("c-search", cost=cost_urls.cost_from_query)  # the same one again is fine


@pytest.mark.parametrize(
    ("rates", "algorithm", "burst", "cost", "error"),
    [
        ("10/h", "fixed_window", "", "0", "Ensure this value is greater than or equal to 1."),
        ("10/h", "fixed_window", "", "1000001", "less than or equal to 1000000"),
        ("10/h", "fixed_window", "", "-3", "greater than or equal to 0"),
        ("10/h", "fixed_window", "", "lots", "Enter a whole number."),
        ("10/s, 100/h", "fixed_window", "", "11", "could never pass 10/s"),
        ("10/s", "token_bucket", "4", "11", "could never pass 10/s"),
    ],
)
def test_admin_refuses_a_bad_cost_as_a_form_error(
    admin_client: Client, rates: str, algorithm: str, burst: str, cost: str, error: str
) -> None:
    from tests.dashboard.test_admin import add_url, form

    response = admin_client.post(
        add_url(), form(rates=rates, algorithm=algorithm, burst=burst, cost=cost)
    )
    assert response.status_code == 200
    assert any(error in m for m in response.context["adminform"].form.errors["cost"])
    assert not Policy.objects.filter(name="api").exists()


@pytest.mark.parametrize(
    ("algorithm", "burst", "rates", "cost"),
    [
        ("fixed_window", "", "10/s, 100/h", "10"),
        # Above the burst: passes when the bucket is full, and leaves it in debt.
        ("token_bucket", "4", "10/s", "10"),
    ],
)
def test_admin_saves_a_cost_the_rates_hold(
    admin_client: Client, algorithm: str, burst: str, rates: str, cost: str
) -> None:
    from tests.dashboard.test_admin import add_url, form

    response = admin_client.post(
        add_url(), form(rates=rates, algorithm=algorithm, burst=burst, cost=cost)
    )
    assert response.status_code == 302
    assert Policy.objects.get(name="api").to_spec().cost == int(cost)
