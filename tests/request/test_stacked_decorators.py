"""``@ratelimit`` stacked on one view is all or nothing per identity, with or without the
middleware: the first decorator a request reaches decides every policy of the stack in
one call (an exactness review: without the middleware each decorator made its own call,
so a request the inner one refused had already been charged by the outer one)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.test import Client, override_settings

from django_ratelimits.engine import Check, Identity, get_engine
from django_ratelimits.models import Policy
from django_ratelimits.policies import get_registry
from tests.engine_helpers import check_calls

pytestmark = pytest.mark.django_db

WITHOUT = [m for m in settings.MIDDLEWARE if "RateLimitMiddleware" not in m]
IP = "198.51.100.20"


@pytest.fixture(params=["middleware", "decorators-alone"])
def site(request: pytest.FixtureRequest, frozen_clock: Any) -> Iterator[None]:
    stack = settings.MIDDLEWARE if request.param == "middleware" else WITHOUT
    for name, rates in [
        ("st-outer", "5/h"),
        ("st-inner", "3/h"),
        ("st-soft", "4/h"),
        ("st-hard", "2/h"),
    ]:
        Policy.objects.create(name=name, rates=rates, algorithm="fixed_window")
    get_registry().refresh()
    with override_settings(ROOT_URLCONF="tests.stacked_urls", MIDDLEWARE=stack):
        yield


def remaining(name: str) -> int:
    spec = get_registry().get(name)
    assert spec is not None
    return get_engine().peek([Check(Identity("ip", IP), spec.limits)]).results[0].remaining


def test_a_request_the_inner_decorator_refuses_costs_the_outer_one_nothing(site: None) -> None:
    me = Client(REMOTE_ADDR=IP)
    assert [me.get("/stacked").status_code for _ in range(6)] == [200] * 3 + [429] * 3
    assert remaining("st-outer") == 2  # the 3 requests that went on
    assert [me.get("/outer").status_code for _ in range(3)] == [200, 200, 429]


def test_a_soft_outer_policy_counts_only_the_requests_that_go_on(site: None) -> None:
    me = Client(REMOTE_ADDR=IP)
    assert [me.get("/soft-outside").status_code for _ in range(6)] == [200] * 2 + [429] * 4
    assert remaining("st-soft") == 2


@pytest.mark.parametrize("redis_client", ["standalone"], indirect=True)
def test_a_stack_is_one_round_trip(site: None, site_redis: Any) -> None:
    me = Client(REMOTE_ADDR=IP)
    me.get("/stacked")  # a cluster node loads the engine's code on its first call
    before = check_calls(site_redis)
    assert me.get("/stacked").status_code == 200
    assert check_calls(site_redis) - before == 1
