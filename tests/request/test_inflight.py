"""Concurrency policies on the whole request path (Django's test clients, real Redis):
a slot is held while the view runs and its response streams, and given back when the
response ends, when the view raises, and when the request is refused."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from django.conf import settings
from django.test import AsyncClient, Client, override_settings

from django_ratelimits.models import Policy
from django_ratelimits.policies import get_registry
from tests.request.inflight_urls import in_flight

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.request.inflight_urls")]


@pytest.fixture
def slots(site_redis: Any) -> Any:
    """One slot per client IP on /inflight/, leased 30 s."""
    with override_settings(ROOT_URLCONF="tests.request.inflight_urls"):
        Policy.objects.create(
            name="cc", algorithm="concurrency", rates="1", lease=30, path=r"^/inflight/"
        )
        get_registry().refresh()
        yield site_redis


def test_the_view_runs_holding_its_slot_and_the_response_gives_it_back(slots: Any) -> None:
    client = Client()
    for _ in range(3):
        response = client.get("/inflight/report")
        assert response.status_code == 200
        assert response.json() == {"in_flight": 1}, "the view ran without its slot"
    assert in_flight("cc") == 0
    assert response["RateLimit-Policy"] == '"cc";q=1;w=30'
    assert response["RateLimit"].startswith('"cc";r=0;')  # the view's own slot


def test_a_streaming_response_holds_its_slot_until_consumed(slots: Any) -> None:
    client = Client()
    streaming = client.get("/inflight/stream")
    assert streaming.status_code == 200
    assert in_flight("cc") == 1
    refused = client.get("/inflight/report")
    assert refused.status_code == 429
    assert refused["Retry-After"] == "1"
    assert refused["RateLimit"] == '"cc";r=0;t=1'
    assert b"".join(streaming.streaming_content) == b"first second"
    assert in_flight("cc") == 0
    assert client.get("/inflight/report").status_code == 200


def test_a_streaming_response_closed_early_gives_its_slot_back(slots: Any) -> None:
    streaming = Client().get("/inflight/stream")
    assert in_flight("cc") == 1
    streaming.close()  # what a WSGI server does when the client goes away
    assert in_flight("cc") == 0


def test_a_view_that_raises_gives_its_slot_back(slots: Any) -> None:
    client = Client(raise_request_exception=False)
    for _ in range(3):
        assert client.get("/inflight/boom").status_code == 500
    assert in_flight("cc") == 0


def test_a_refused_request_holds_no_slot(slots: Any) -> None:
    client = Client()
    streaming = client.get("/inflight/stream")
    for _ in range(3):
        assert client.get("/inflight/report").status_code == 429
    streaming.close()
    assert in_flight("cc") == 0


def test_a_denial_by_another_policy_gives_the_slot_back(slots: Any) -> None:
    """All or nothing per identity: a user policy denies, the IP's slot was taken and
    the 429 response's end gives it back."""
    Policy.objects.create(name="per-ip-hourly", rates="1/h", path=r"^/inflight/", key="ip")
    get_registry().refresh()
    client = Client()
    assert client.get("/inflight/report").status_code == 200
    assert client.get("/inflight/report").status_code == 429
    assert in_flight("cc") == 0


def test_the_async_stack_holds_and_gives_back(slots: Any) -> None:
    async def run() -> tuple[int, int, int, bytes]:
        client = AsyncClient(raise_request_exception=False)
        streaming = await client.get("/inflight/astream")
        held = await asyncio.to_thread(in_flight, "cc")
        refused = (await client.get("/inflight/astream")).status_code
        body = b"".join([chunk async for chunk in streaming.streaming_content])
        failed = (await client.get("/inflight/aboom")).status_code
        return held, refused, failed, body

    held, refused, failed, body = asyncio.run(run())
    assert (held, refused, failed, body) == (1, 429, 500, b"first second")
    assert in_flight("cc") == 0


def test_the_decorator_holds_its_policys_slot(site_redis: Any) -> None:
    with override_settings(ROOT_URLCONF="tests.request.inflight_urls"):
        get_registry().refresh()
        client = Client(raise_request_exception=False)
        assert client.get("/decorated").json() == {"in_flight": 1}
        assert in_flight("t-cc-deco") == 0
        assert client.get("/decorated-boom").status_code == 500
        assert in_flight("t-cc-raise") == 0


def test_the_async_decorator_holds_its_slot_while_streaming(site_redis: Any) -> None:
    async def run() -> tuple[int, int]:
        client = AsyncClient()
        streaming = await client.get("/adecorated")
        refused = (await client.get("/adecorated")).status_code
        held = await asyncio.to_thread(in_flight, "t-cc-adeco")
        b"".join(streaming.streaming_content)  # the view streams a sync iterator
        return refused, held

    with override_settings(ROOT_URLCONF="tests.request.inflight_urls"):
        get_registry().refresh()
        assert asyncio.run(run()) == (429, 1)
        assert in_flight("t-cc-adeco") == 0


def test_without_the_middleware_the_decorator_gives_back_alone(site_redis: Any) -> None:
    with override_settings(
        ROOT_URLCONF="tests.request.inflight_urls",
        MIDDLEWARE=[m for m in settings.MIDDLEWARE if "ratelimits" not in m],
    ):
        get_registry().refresh()
        client = Client()
        for _ in range(3):
            assert client.get("/decorated").json() == {"in_flight": 1}
        assert in_flight("t-cc-deco") == 0


@pytest.mark.parametrize("stack", ["middleware", "decorator-alone"])
def test_a_class_based_view_holds_its_decorators_slot_sync_or_async(
    site_redis: Any, stack: str
) -> None:
    """``method_decorator(ratelimit(...), name="dispatch")`` on an async class-based
    view: ``dispatch`` is a sync method that returns the handler's coroutine. The
    decorator took it for a sync view and the coroutine for "no response", and gave
    the request's slots back before the view ran."""
    middleware = settings.MIDDLEWARE
    if stack == "decorator-alone":
        middleware = [m for m in settings.MIDDLEWARE if "ratelimits" not in m]

    async def run() -> Any:
        return (await AsyncClient().get("/adecorated-cbv")).json()

    with override_settings(ROOT_URLCONF="tests.request.inflight_urls", MIDDLEWARE=middleware):
        get_registry().refresh()
        assert Client().get("/decorated-cbv").json() == {"in_flight": 1}
        assert asyncio.run(run()) == {"in_flight": 1}, "the async view ran without its slot"
        assert in_flight("t-cc-cbv") == 0 and in_flight("t-cc-acbv") == 0


def test_a_drf_throttle_slot_is_given_back_by_the_middleware(site_redis: Any) -> None:
    """The throttle has no response to hook: its decision joins ``request.ratelimit``,
    whose slots the middleware gives back when the response ends."""
    Policy.objects.create(name="drf-api", algorithm="concurrency", rates="1")
    get_registry().refresh()
    with override_settings(ROOT_URLCONF="tests.compat_urls"):
        client = Client()
        assert [client.get("/drf/api").status_code for _ in range(3)] == [200] * 3
    assert in_flight("drf-api") == 0
