"""A denial the worker's cache answers reports the wait Redis would have reported, less
the time since Redis answered: in ``Retry-After``, the ``RateLimit`` field's ``t``, the
429 page's words, the ``rate_limited`` signal, DRF's ``wait()`` and compat's
``time_left``. Never the whole window afresh, never 0.

Each test runs twice, on real Redis: on the engine's test clock, frozen and moved by
the test (the answers are then exact), and on Redis' own clock, where only what holds at
any speed is asserted: the cache's wait is at most Redis' one, and at least Redis' one
less the time the test measured between the two answers.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.test import Client, RequestFactory, override_settings
from rest_framework.request import Request

from django_ratelimits.compat import get_usage
from django_ratelimits.contrib.drf import PolicyThrottle
from django_ratelimits.engine import get_engine
from django_ratelimits.models import Policy
from django_ratelimits.offenders.text import words
from django_ratelimits.policies import get_registry
from django_ratelimits.signals import rate_limited
from django_ratelimits.testing import FakeClock, fake_clock
from tests.compat_urls import ScopedApi
from tests.engine_helpers import EPOCH_US, EngineCalls

pytestmark = pytest.mark.django_db
ADDRESS = "203.0.113.9"
PAUSE = 30  # seconds the frozen clock moves between the answers (an entry holds 60 at most)


class Between:
    """The engine's time between Redis' answer and the cache's, in seconds: ``low`` to
    ``high``. Exact on the frozen clock (the test moves it); on Redis' own clock, 0 to
    what the worker's monotonic clock measured from before Redis was asked."""

    def __init__(self, clock: FakeClock | None) -> None:
        self.clock = clock
        self.low = self.high = 0.0
        self._start = time.monotonic()

    def start(self) -> None:
        self._start = time.monotonic()

    def pause(self) -> None:
        """Between Redis' answer and the cache's: the frozen clock moves."""
        if self.clock is not None:
            self.clock.advance(PAUSE)
            self.low = self.high = PAUSE

    def stop(self) -> None:
        """After the cache's answer: on Redis' clock, the time since :meth:`start`."""
        if self.clock is None:
            self.high = time.monotonic() - self._start

    def check(self, redis_said: float, cache_said: float, *, whole: bool = True) -> None:
        """``cache_said`` is ``redis_said`` less the time between (rounded up to whole
        seconds, as the headers are, when ``whole``)."""
        if whole:
            least, most = redis_said - math.ceil(self.high), redis_said - math.floor(self.low)
        else:
            least, most = redis_said - self.high, redis_said - self.low
        assert least <= cache_said <= most, (redis_said, cache_said, self.low, self.high)
        assert cache_said > 0


@pytest.fixture(params=["frozen clock", "Redis' clock"])
def between(request: pytest.FixtureRequest, site_redis: Any) -> Between:
    frozen = request.param == "frozen clock"
    return Between(request.getfixturevalue("frozen_clock") if frozen else None)


@pytest.fixture
def signalled() -> Iterator[list[int]]:
    """The ``retry_after_us`` of each ``rate_limited`` sent."""
    seen: list[int] = []
    rate_limited.connect(
        lambda result, **kw: seen.append(result.retry_after_us), weak=False, dispatch_uid="waits"
    )
    yield seen
    rate_limited.disconnect(dispatch_uid="waits")


def t_of(response: Any) -> int:
    found = re.fullmatch(r'"[^"]+";r=0;t=(\d+)', response["RateLimit"])
    assert found is not None, response["RateLimit"]
    return int(found[1])


def test_the_middleware_s_cached_429_says_redis_wait_less_the_time_since(
    between: Between, signalled: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A sliding log: on Redis' clock no window can end between the requests.
    Policy.objects.create(name="api", rates="2/h", path=r"^/api/", algorithm="sliding_log")
    get_registry().refresh()
    me = Client(REMOTE_ADDR=ADDRESS, HTTP_ACCEPT="text/html")
    assert [me.get("/api/hello").status_code for _ in range(3)] == [200, 200, 429]
    between.start()
    redis = me.get("/api/hello")  # Redis' answer, which the cache learns
    calls = EngineCalls(monkeypatch)
    between.pause()
    cached = me.get("/api/hello")
    between.stop()
    assert calls.n == 0, "the cache did not answer"
    assert redis.status_code == cached.status_code == 429
    waited = int(cached["Retry-After"])
    between.check(int(redis["Retry-After"]), waited)
    assert waited <= 3600
    assert t_of(cached) == waited and t_of(redis) == int(redis["Retry-After"])
    assert f"You can try again in {words(waited)}." in cached.content.decode()
    *_, redis_us, cached_us = signalled
    between.check(redis_us / 1e6, cached_us / 1e6, whole=False)


def test_drf_s_cached_wait_is_redis_wait_less_the_time_since(
    between: Between, monkeypatch: pytest.MonkeyPatch
) -> None:
    Policy.objects.create(name="drf-api", rates="1/h", algorithm="sliding_log")
    get_registry().refresh()

    def throttled() -> float:
        request = Request(RequestFactory().get("/drf/api", REMOTE_ADDR=ADDRESS))
        throttle = PolicyThrottle()
        assert throttle.allow_request(request, ScopedApi()) is False
        wait = throttle.wait()
        assert wait is not None
        return wait

    with override_settings(ROOT_URLCONF="tests.compat_urls"):
        assert Client(REMOTE_ADDR=ADDRESS).get("/drf/api").status_code == 200
        throttled()  # reads the epoch
        between.start()
        redis = throttled()
        calls = EngineCalls(monkeypatch)
        between.pause()
        cached = throttled()
        between.stop()
    assert calls.n == 0, "the cache did not answer"
    between.check(redis, cached)


def test_compat_s_cached_time_left_is_redis_less_the_time_since(
    between: Between, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Fixed windows aligned to the epoch: a period of 30 days, which no test run crosses
    # on Redis' clock but once a month.
    options: dict[str, Any] = {"group": "g", "key": "ip", "rate": "1/30d", "increment": True}
    request = RequestFactory().get("/", REMOTE_ADDR=ADDRESS)
    assert [get_usage(request, **options) for _ in range(2)][1]["should_limit"]  # type: ignore[index]
    between.start()
    redis = get_usage(request, **options)
    calls = EngineCalls(monkeypatch)
    between.pause()
    cached = get_usage(request, **options)
    looked = get_usage(request, **{**options, "increment": False})
    between.stop()
    assert calls.n == 0, "the cache did not answer"
    assert redis is not None and cached is not None and looked is not None
    assert cached["should_limit"] and looked["should_limit"]
    between.check(redis["time_left"], cached["time_left"])
    between.check(redis["time_left"], looked["time_left"])
    assert looked["time_left"] <= cached["time_left"] <= 30 * 86_400


def test_under_the_test_kit_s_clock_the_cache_and_redis_tell_one_time_left(
    site_redis: Any,
) -> None:
    """What a project's own tests see (docs/testing.md): the kit's clock drives whatever
    engine the settings make, so a test that turns the cache off gets the same answer
    from Redis as the cache gave."""
    options: dict[str, Any] = {"group": "g", "key": "ip", "rate": "1/h", "increment": True}
    request = RequestFactory().get("/", REMOTE_ADDR=ADDRESS)
    with fake_clock(start_us=EPOCH_US + 2675 * 1_000_000):
        charged = [get_usage(request, **options) for _ in range(3)]
        assert [u["should_limit"] for u in charged if u] == [False, True, True]
        cached = get_usage(request, **options)
        without = {**settings.DJANGO_RATELIMITS, "DENIAL_CACHE": 0}
        with override_settings(DJANGO_RATELIMITS=without):
            assert get_engine().clock is not None
            looked = get_usage(request, **{**options, "increment": False})
    assert cached is not None and looked is not None
    assert cached["time_left"] == looked["time_left"] == 925
