"""A view's policy whose denial refuses nothing (``@ratelimit(block=False)``) never
switches off the request's other limits, and a policy the view applies with
``block=True`` refuses through the middleware even where its decorator is never
reached: two ways the middleware's one call once let requests go uncounted."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.test import Client, RequestFactory, override_settings
from django.urls import path

from django_ratelimits.decorators import ratelimit
from django_ratelimits.middleware import RateLimitMiddleware
from django_ratelimits.models import Policy
from django_ratelimits.policies import get_registry

pytestmark = pytest.mark.django_db


@ratelimit("s-hard", rate="3/m", key="ip")  # refuses past 3 a minute
@ratelimit("s-soft", rate="1/m", key="ip", block=False)  # only tells the view
def search(request: HttpRequest) -> HttpResponse:
    return HttpResponse("results")


@ratelimit("s-ahard", rate="3/m", key="ip")
@ratelimit("s-asoft", rate="1/m", key="ip", block=False)
async def asearch(request: HttpRequest) -> HttpResponse:
    return HttpResponse("results")


@ratelimit("s-loose", rate="5/m", key="ip", block=False)
def loose(request: HttpRequest) -> HttpResponse:
    return HttpResponse("loose")


@login_required  # answers a redirect before the decorator under it runs
@ratelimit("s-inner", rate="2/m", key="ip")
def members(request: HttpRequest) -> HttpResponse:
    return HttpResponse("members")


@ratelimit("s-keyed", block=False)  # its row comes from the test (no default: nothing
def keyed(request: HttpRequest) -> HttpResponse:  # declared that other tests would see)
    return HttpResponse("keyed")


def plain(request: HttpRequest) -> HttpResponse:
    return HttpResponse("plain")


urlpatterns = [
    path("search", search),
    path("asearch", asearch),
    path("loose", loose),
    path("members", members),
    path("plain", plain),
    path("keyed", keyed),
    path("accounts/login/", plain),
]


@pytest.fixture
def site(site_redis: Any) -> Any:
    with override_settings(ROOT_URLCONF=__name__):
        get_registry().refresh()
        yield site_redis


def statuses(url: str, n: int) -> list[int]:
    client = Client()
    return [client.get(url).status_code for _ in range(n)]


def test_a_spent_soft_policy_leaves_the_views_blocking_one_in_force(site: Any) -> None:
    assert statuses("/search", 10) == [200] * 3 + [429] * 7


def test_the_same_through_the_async_stack(site: Any) -> None:
    middleware = RateLimitMiddleware(asearch)
    assert middleware.async_mode

    async def ten() -> list[int]:
        got = []
        for _ in range(10):
            response = await middleware(RequestFactory().get("/asearch"))  # type: ignore[misc]
            got.append(response.status_code)
        return got

    assert asyncio.run(ten()) == [200] * 3 + [429] * 7


def test_without_the_middleware_too(site: Any) -> None:
    middleware = [m for m in settings.MIDDLEWARE if "RateLimitMiddleware" not in m]
    with override_settings(MIDDLEWARE=middleware):
        assert statuses("/search", 10) == [200] * 3 + [429] * 7


@pytest.mark.parametrize("cache", [0, 10_000])
def test_a_spent_soft_policy_leaves_a_path_policy_counting(site: Any, cache: int) -> None:
    """With or without the worker's cache of denials: a soft denial it holds must not
    answer for the path policy either."""
    Policy.objects.create(name="site", rates="3/m", path=r"^/", algorithm="sliding_log")
    get_registry().refresh()
    with override_settings(DJANGO_RATELIMITS={**settings.DJANGO_RATELIMITS, "DENIAL_CACHE": cache}):
        client = Client()
        got = [client.get("/search").status_code for _ in range(2)]  # s-soft spent
        got += [client.get("/plain").status_code for _ in range(2)]  # site spent
        got += [client.get("/search").status_code for _ in range(2)]
    # The site policy counts every request let through, the ones the soft policy
    # denied too: the 4th request anywhere is refused.
    assert got == [200, 200, 200, 429, 429, 429]


def test_a_request_a_blocking_policy_refuses_costs_the_soft_one_nothing(site: Any) -> None:
    Policy.objects.create(name="site", rates="1/m", path=r"^/loose")
    get_registry().refresh()
    assert statuses("/loose", 6) == [200] + [429] * 5
    Policy.objects.filter(name="site").delete()
    get_registry().refresh()
    # Five refused requests cost s-loose (5/m) nothing: this second one leaves 3.
    assert Client().get("/loose").headers["RateLimit"].startswith('"s-loose";r=3;')


def test_a_blocking_view_policy_refuses_where_its_decorator_is_never_reached(
    site: Any,
) -> None:
    """``@login_required`` redirects before ``@ratelimit`` under it runs: the
    middleware, which counted s-inner, refuses once it denies, or the requests it
    lets through would count nowhere (the path policy's limits share its check)."""
    Policy.objects.create(name="site", rates="5/m", path=r"^/")
    get_registry().refresh()
    assert statuses("/members", 6) == [302, 302] + [429] * 4
    # The site policy counted the two let through, and no refused one.
    assert statuses("/plain", 4) == [200, 200, 200, 429]


def test_a_refused_request_costs_a_soft_policy_under_another_budget_nothing(
    site: Any, django_user_model: Any
) -> None:
    """The path's policy counts the same user with no identity budget, the view's soft
    policy with the default one: on a cluster their checks go in different calls, and
    the soft one must still wait for the path's answer."""
    Policy.objects.create(name="s-keyed", rates="5/m", key="user")  # the default budget
    Policy.objects.create(
        name="s-keyed-path", rates="1/m", path=r"^/keyed", key="user", identity_budget="off"
    )
    get_registry().refresh()
    client = Client()
    client.force_login(django_user_model.objects.create_user("soft-tester"))
    assert [client.get("/keyed").status_code for _ in range(5)] == [200] + [429] * 4
    Policy.objects.filter(name="s-keyed-path").delete()
    get_registry().refresh()
    # Four refused requests cost s-keyed (5/m) nothing: this second one leaves 3.
    assert client.get("/keyed").headers["RateLimit"].startswith('"s-keyed";r=3;')
