"""Metrics (issue 14): whole requests through Django's test client against real Redis,
counted by a Prometheus observer on a fresh registry per test (docs/metrics.md)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import AsyncClient, Client, RequestFactory, override_settings
from prometheus_client import CollectorRegistry

from django_ratelimits import metrics
from django_ratelimits.compat import get_usage, is_ratelimited
from django_ratelimits.metrics import Outcome, observing, prometheus
from django_ratelimits.metrics.prometheus import PREFIX, PrometheusMetrics
from django_ratelimits.models import Policy
from django_ratelimits.policies import get_registry
from django_ratelimits.testing import FakeClock
from tests.engine_helpers import EngineCalls

pytestmark = pytest.mark.django_db
DECISIONS = f"{PREFIX}_decisions_total"
ENGINE_CALLS = f"{PREFIX}_engine_call_seconds_count"
TOKEN = "t" * 40


@pytest.fixture
def registry() -> Iterator[CollectorRegistry]:
    """A Prometheus observer on a registry of this test's own."""
    fresh = CollectorRegistry()
    with observing(PrometheusMetrics(fresh)):
        yield fresh


def policy(**fields: Any) -> None:
    Policy.objects.create(**{"name": "api", "rates": "3/h", "path": r"^/api/", **fields})
    get_registry().refresh()


def decisions(registry: CollectorRegistry, policy: str = "api") -> dict[str, float]:
    """The policy's decisions by outcome (the ones counted at least once)."""
    found = {
        outcome.value: registry.get_sample_value(
            DECISIONS, {"policy": policy, "outcome": outcome.value}
        )
        for outcome in Outcome
    }
    return {outcome: value for outcome, value in found.items() if value}


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(f"{PREFIX}_{name}", labels) or 0.0


def statuses(client: Client, n: int, path: str = "/api/hello") -> list[int]:
    return [client.get(path).status_code for _ in range(n)]


def test_allowed_denied_near_limit_and_cache_refusals_are_counted_per_policy(
    frozen_clock: FakeClock, registry: CollectorRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy()
    calls = EngineCalls(monkeypatch)
    client = Client(REMOTE_ADDR="203.0.113.9")
    assert statuses(client, 5) == [200, 200, 200, 429, 429]
    assert decisions(registry) == {"allowed": 3, "denied": 2}
    # Remaining 2, 1, 0 of 3: only the last is under a tenth of the quota.
    assert sample(registry, "near_limit_total", policy="api") == 1
    # The fifth request's denial was learnt: the sixth is refused without Redis.
    assert statuses(client, 1) == [429]
    assert decisions(registry) == {"allowed": 3, "denied": 3}
    assert sample(registry, "denial_cache_refusals_total", policy="api") == 1
    assert calls.n == 5
    assert registry.get_sample_value(ENGINE_CALLS) == calls.n


def test_a_request_the_denial_cache_refuses_counts_under_each_enforced_policy(
    frozen_clock: FakeClock, registry: CollectorRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "strict" denies; "wide" counts the same requests and never denies. Redis answers the
    # first three, the cache the last two: each request counts once under "wide" too.
    policy(name="strict", rates="1/h")
    policy(name="wide", rates="100/h", path=r"^/")
    calls = EngineCalls(monkeypatch)
    assert statuses(Client(REMOTE_ADDR="203.0.113.9"), 5) == [200] + [429] * 4
    assert calls.n == 3
    assert sample(registry, "denial_cache_refusals_total", policy="strict") == 2
    assert decisions(registry, "strict") == {"allowed": 1, "denied": 4}
    assert decisions(registry, "wide") == {"allowed": 5}


def test_near_limit_is_less_than_a_tenth_of_the_quota_left(
    frozen_clock: FakeClock, registry: CollectorRegistry
) -> None:
    policy(rates="20/h")
    client = Client(REMOTE_ADDR="203.0.113.9")
    assert statuses(client, 20) == [200] * 20
    # Left after each: 19 ... 0; 1 and 0 are under 2 (a tenth of 20).
    assert sample(registry, "near_limit_total", policy="api") == 2
    assert decisions(registry) == {"allowed": 20}


def test_a_shadow_policy_counts_shadow_denials_not_denials(
    frozen_clock: FakeClock, registry: CollectorRegistry
) -> None:
    policy(name="watch", rates="1/h", mode="shadow")
    assert statuses(Client(REMOTE_ADDR="203.0.113.9"), 3) == [200] * 3
    assert decisions(registry, "watch") == {"allowed": 1, "shadow_denied": 2}


def test_a_request_counts_once_per_policy_whatever_its_identities(
    frozen_clock: FakeClock, registry: CollectorRegistry
) -> None:
    # Two identities (address and user) of one policy, and a second policy: one request,
    # one decision under each.
    policy(key="user_or_ip")
    policy(name="other", rates="10/h")
    user = User.objects.create_user("ann", password="pw")
    client = Client(REMOTE_ADDR="203.0.113.9")
    client.force_login(user)
    assert statuses(client, 4) == [200, 200, 200, 429]
    assert decisions(registry) == {"allowed": 3, "denied": 1}
    assert decisions(registry, "other") == {"allowed": 4}


def test_async_requests_are_counted_and_timed(
    frozen_clock: FakeClock, registry: CollectorRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = EngineCalls(monkeypatch)

    async def run() -> list[int]:
        client = AsyncClient()  # its address is 127.0.0.1 (REMOTE_ADDR would be a header)
        return [(await client.get("/async")).status_code for _ in range(3)]

    assert asyncio.run(run()) == [200, 200, 429]
    assert decisions(registry, "t-async") == {"allowed": 2, "denied": 1}
    assert registry.get_sample_value(ENGINE_CALLS) == calls.n == 3


@pytest.mark.parametrize("redis_client", ["standalone"], indirect=True)  # stops the server
def test_redis_down_counts_failed_open_failed_closed_and_the_breaker(
    site_redis: Any, registry: CollectorRegistry, request: pytest.FixtureRequest
) -> None:
    policy()
    policy(name="closed", rates="100/h", path=r"^/login", fail_closed=True)
    server = request.getfixturevalue("redis_standalone")
    assert statuses(Client(), 1) == [200]
    assert sample(registry, "breaker_open") == 0
    server.stop()
    try:
        # BREAKER_FAILURES (3) calls fail, then the breaker answers without Redis.
        assert statuses(Client(), 4) == [200] * 4
        assert Client().post("/login").status_code == 503
    finally:
        server.start()
    assert decisions(registry) == {"allowed": 1, "failed_open": 4}
    assert decisions(registry, "closed") == {"failed_closed": 1}
    assert sample(registry, "breaker_open") == 1
    assert registry.get_sample_value(ENGINE_CALLS) == 1 + 3  # no call while it was open
    # Redis is back: once the cooldown is over, the next request's trial closes the breaker.
    short = {**settings.DJANGO_RATELIMITS, "BREAKER_COOLDOWN": 0.1}
    with override_settings(DJANGO_RATELIMITS=short):
        time.sleep(0.2)
        assert statuses(Client(), 1) == [200]
    assert sample(registry, "breaker_open") == 0
    assert decisions(registry) == {"allowed": 2, "failed_open": 4}


@pytest.mark.parametrize("redis_client", ["standalone"], indirect=True)  # stops the server
def test_the_breaker_gauge_follows_the_breaker_whatever_call_moves_it(
    site_redis: Any, registry: CollectorRegistry, request: pytest.FixtureRequest
) -> None:
    # The compat layer's peeks are not counted as decisions, but they use the process's
    # breaker: the one whose failure opens it, or whose answer closes it, moves the gauge.
    server = request.getfixturevalue("redis_standalone")
    asked = RequestFactory().get("/", REMOTE_ADDR="203.0.113.9")
    options: dict[str, Any] = {"group": "g", "key": "ip", "rate": "10/h"}
    assert not is_ratelimited(asked, **options, increment=True)
    server.stop()
    try:
        assert [is_ratelimited(asked, **options, increment=True) for _ in range(2)] == [False] * 2
        assert get_usage(asked, **options) is None  # the third failure in a row: it opens
        assert sample(registry, "breaker_open") == 1
        assert not is_ratelimited(asked, **options, increment=True)  # the breaker answers
    finally:
        server.start()
    assert decisions(registry, "g") == {"allowed": 1, "failed_open": 3}
    assert sample(registry, "breaker_open") == 1
    short = {**settings.DJANGO_RATELIMITS, "BREAKER_COOLDOWN": 0.1}
    with override_settings(DJANGO_RATELIMITS=short):
        time.sleep(0.2)
        assert get_usage(asked, **options) is not None  # the trial, a peek: Redis answers
    assert sample(registry, "breaker_open") == 0


def test_compat_counts_charges_not_peeks(
    frozen_clock: FakeClock, registry: CollectorRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = EngineCalls(monkeypatch)
    request = RequestFactory().get("/", REMOTE_ADDR="203.0.113.9")
    options: dict[str, Any] = {"group": "g", "key": "ip", "rate": "2/h"}
    assert not is_ratelimited(request, **options, increment=True)
    assert not is_ratelimited(request, **options, increment=False)
    assert get_usage(request, **options) is not None
    assert [is_ratelimited(request, **options, increment=True) for _ in range(2)] == [False, True]
    assert decisions(registry, "g") == {"allowed": 2, "denied": 1}
    # The charges' engine calls are timed; the peeks' (engine.peek) are not.
    assert registry.get_sample_value(ENGINE_CALLS) == calls.n == 3


def test_a_flood_of_new_identities_adds_no_series(
    frozen_clock: FakeClock, registry: CollectorRegistry
) -> None:
    policy(rates="1/h", path=r"^/api/hello")
    policy(name="keys", rates="1/h", key="header", key_arg="X-Api-Key", path=r"^/api/other")

    def series() -> set[tuple[str, tuple[tuple[str, str], ...]]]:
        return {
            (s.name, tuple(sorted(s.labels.items())))
            for family in registry.collect()
            for s in family.samples
        }

    def flood(first: int, n: int) -> None:
        for i in range(first, first + n):
            address = f"10.{i // 65536}.{i // 256 % 256}.{i % 256}"
            client = Client(REMOTE_ADDR=address, HTTP_X_API_KEY=f"key-{i}")
            assert statuses(client, 2) == [200, 429]
            assert statuses(client, 2, "/api/other") == [200, 429]

    flood(0, 5)
    before = series()
    flood(5, 300)
    assert series() == before
    assert {dict(labels).get("policy") for _, labels in before} <= {None, "api", "keys"}
    assert decisions(registry) == decisions(registry, "keys") == {"allowed": 305, "denied": 305}


def test_a_flood_of_new_paths_adds_no_series(
    frozen_clock: FakeClock, registry: CollectorRegistry
) -> None:
    # Paths a client invents (pages that exist, 404s, a line break, a label-like text)
    # are never a label: one policy's two outcomes, whatever the number of paths.
    policy(name="site", rates="1/h", path=r"^/")
    paths = [f"/{i}-" for i in range(100)] + [f"/nowhere/{i}" for i in range(100)]
    paths += ['/x%0A", policy="evil', "/été-"]
    for path in paths:
        assert statuses(Client(REMOTE_ADDR="203.0.113.9"), 1, path) in ([200], [404], [429])
    families = {
        f.name: {tuple(sorted(s.labels.items())) for s in f.samples} for f in registry.collect()
    }
    assert families["django_ratelimits_decisions"] == {
        (("outcome", "allowed"), ("policy", "site")),
        (("outcome", "denied"), ("policy", "site")),
    }
    assert decisions(registry, "site") == {"allowed": 1, "denied": len(paths) - 1}


def test_metrics_off_by_default_observe_nothing(site_redis: Any) -> None:
    assert metrics.observer() is None
    policy()
    assert statuses(Client(), 1) == [200]
    with override_settings(ROOT_URLCONF="tests.metrics_urls"):
        assert Client().get("/ratelimits/metrics").status_code == 404


def test_the_setting_chooses_the_default_registry_s_observer(
    site_redis: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The default registry, and the observer made on it, are this test's own.
    monkeypatch.setattr(prometheus, "REGISTRY", CollectorRegistry())
    monkeypatch.setattr(prometheus, "_default", None)
    config = {**settings.DJANGO_RATELIMITS, "METRICS": "prometheus"}
    with override_settings(DJANGO_RATELIMITS=config):
        chosen = metrics.observer()
        assert isinstance(chosen, PrometheusMetrics)
        assert chosen is metrics.observer()  # once per process
        assert chosen.registry is prometheus.REGISTRY
    assert metrics.observer() is None  # the setting changed back


@pytest.fixture
def view(site_redis: Any, registry: CollectorRegistry) -> Iterator[CollectorRegistry]:
    """The metrics view of ``tests.metrics_urls``, with ``METRICS`` on and a token."""
    config = {**settings.DJANGO_RATELIMITS, "METRICS": "prometheus", "METRICS_TOKEN": TOKEN}
    with override_settings(DJANGO_RATELIMITS=config, ROOT_URLCONF="tests.metrics_urls"):
        yield registry


URL = "/ratelimits/metrics"


def test_the_view_shows_the_counts_to_the_token_and_to_staff(view: CollectorRegistry) -> None:
    policy()
    assert statuses(Client(), 2) == [200, 200]
    scraped = Client().get(URL, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert scraped.status_code == 200
    assert scraped["Content-Type"].startswith("text/plain")
    assert "no-cache" in scraped["Cache-Control"] or "max-age=0" in scraped["Cache-Control"]
    body = scraped.content.decode()
    assert f'{DECISIONS}{{outcome="allowed",policy="api"}} 2.0' in body
    staff = Client()
    staff.force_login(User.objects.create_user("ops", password="pw", is_staff=True))
    assert staff.get(URL).status_code == 200


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer wrong", f"Basic {TOKEN}", f"Bearer {TOKEN[:-1]}", "Bearer \u00e9t\u00e9"],
)
def test_the_view_refuses_everyone_else(view: CollectorRegistry, authorization: str | None) -> None:
    headers = {} if authorization is None else {"HTTP_AUTHORIZATION": authorization}
    assert Client().get(URL, **headers).status_code == 403
    user = Client()
    user.force_login(User.objects.create_user("ann", password="pw"))
    assert user.get(URL).status_code == 403


def test_the_view_without_a_token_is_for_staff_only(view: CollectorRegistry) -> None:
    config = {**settings.DJANGO_RATELIMITS, "METRICS_TOKEN": None}
    with override_settings(DJANGO_RATELIMITS=config):
        assert Client().get(URL, HTTP_AUTHORIZATION="Bearer ").status_code == 403
    assert Client().post(URL, HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 405
