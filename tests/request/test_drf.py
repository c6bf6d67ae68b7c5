"""PolicyThrottle: DRF views enforcing the same policies as the middleware, on real Redis."""

from __future__ import annotations

import base64
import logging
import math
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client, RequestFactory, override_settings
from rest_framework.request import Request

from django_ratelimits import decide as limiter_module
from django_ratelimits.conf import get_settings
from django_ratelimits.contrib.drf import PolicyThrottle
from django_ratelimits.decide import decide
from django_ratelimits.models import Policy
from django_ratelimits.policies import get_registry
from django_ratelimits.testing import FakeClock
from tests.compat_urls import LoginThrottle, ScopedApi, drf_login
from tests.engine_helpers import check_calls

pytestmark = pytest.mark.django_db

DEAD = {"REDIS": "redis://127.0.0.1:1/0", "SOCKET_CONNECT_TIMEOUT": 0.2}


@pytest.fixture
def api(site_redis: Any) -> Iterator[Any]:
    with override_settings(ROOT_URLCONF="tests.compat_urls"):
        yield site_redis


def policy(**fields: Any) -> Policy:
    row = Policy.objects.create(**fields)
    get_registry().refresh()
    return row


def statuses(client: Client, path: str, n: int, method: str = "get") -> list[int]:
    return [getattr(client, method)(path).status_code for _ in range(n)]


def test_an_api_view_enforces_its_scope_exactly(api: Any) -> None:
    policy(name="drf-api", rates="3/m", algorithm="sliding_log")
    client = Client()
    assert statuses(client, "/drf/api", 5) == [200, 200, 200, 429, 429]
    denied = client.get("/drf/api")
    assert denied.json()["detail"].startswith("Request was throttled.")
    assert Client(REMOTE_ADDR="203.0.113.5").get("/drf/api").status_code == 200


def test_retry_after_is_wait_and_matches_the_ratelimit_field(
    api: Any, frozen_clock: FakeClock
) -> None:
    # A fixed window on the fake clock: on Redis' clock a minute could end between the requests.
    policy(name="drf-api", rates="1/m", algorithm="fixed_window")
    client = Client()
    client.get("/drf/api")
    frozen_clock.advance(15)
    denied = client.get("/drf/api")
    assert denied.status_code == 429
    assert denied["Retry-After"] == "45"  # the rest of the minute
    assert denied["RateLimit"] == '"drf-api";r=0;t=45'
    # The throttle on its own: wait() is the verdict's Retry-After.
    frozen_clock.advance(5)
    request = Request(RequestFactory().get("/drf/api"))
    throttle = PolicyThrottle()
    assert throttle.allow_request(request, ScopedApi()) is False
    assert throttle.wait() == request._request.ratelimit.retry_after({"drf-api"}) == 40  # type: ignore[attr-defined]


def test_api_view_function_with_a_policy_subclass(api: Any) -> None:
    policy(name="drf-login", rates="2/m", methods="POST")
    client = Client()
    assert statuses(client, "/drf/login", 3) == [200, 200, 200]  # GET is not limited
    assert statuses(client, "/drf/login", 3, "post") == [200, 200, 429]


def test_quota_is_shared_with_the_decorator(api: Any) -> None:
    policy(name="drf-shared", rates="3/m")
    client = Client()
    assert statuses(client, "/plain/shared", 2) == [200, 200]
    assert statuses(client, "/drf/shared", 2) == [200, 429]
    assert client.get("/plain/shared").status_code == 429


def test_a_path_policy_and_the_throttle_count_a_request_once(api: Any) -> None:
    policy(name="drf-api", rates="3/m", path=r"^/drf/")
    client = Client()
    assert statuses(client, "/drf/api", 4) == [200, 200, 200, 429]
    assert client.get("/drf/login").status_code == 429  # the same policy by path


@pytest.mark.parametrize("redis_client", ["standalone"], indirect=True)
def test_one_round_trip_when_the_middleware_decided_the_policy(api: Any) -> None:
    policy(name="drf-api", rates="10/s, 120/m", path=r"^/drf/", key="ip_and_user")
    policy(name="everything", rates="1000/h", path=r"^/")
    client = Client()
    client.get("/drf/api")
    before = check_calls(api)
    assert client.get("/drf/api").status_code == 200
    assert check_calls(api) - before == 1


@pytest.mark.parametrize("redis_client", ["standalone"], indirect=True)
def test_one_round_trip_when_only_the_throttle_decides(api: Any) -> None:
    policy(name="drf-api", rates="10/s, 120/m", key="ip_and_user")
    client = Client()
    client.get("/drf/api")
    before = check_calls(api)
    assert client.get("/drf/api").status_code == 200
    assert check_calls(api) - before == 1


def test_the_throttle_counts_users_drf_authenticated(api: Any) -> None:
    policy(name="drf-api", rates="1/m", key="user")
    User.objects.create_user("alice", password="pw")
    User.objects.create_user("bob", password="pw")

    def basic(name: str) -> dict[str, str]:
        token = base64.b64encode(f"{name}:pw".encode()).decode()
        return {"Authorization": f"Basic {token}"}

    client = Client()
    assert client.get("/drf/api", headers=basic("alice")).status_code == 200
    assert client.get("/drf/api", headers=basic("alice")).status_code == 429
    assert client.get("/drf/api", headers=basic("bob")).status_code == 200
    assert statuses(client, "/drf/api", 2) == [200, 200]  # anonymous: not counted by user


def test_works_without_the_middleware(api: Any) -> None:
    policy(name="drf-api", rates="2/m")
    plain = [m for m in settings.MIDDLEWARE if "django_ratelimits" not in m]
    with override_settings(MIDDLEWARE=plain):
        response = Client().get("/drf/api")
        assert "RateLimit" not in response
        assert statuses(Client(), "/drf/api", 2) == [200, 429]


def test_views_without_a_policy_are_not_throttled(
    api: Any, caplog: pytest.LogCaptureFixture
) -> None:
    policy(name="drf-api", rates="1/m")
    client = Client()
    assert statuses(client, "/drf/unscoped", 3) == [200] * 3
    limiter_module._reported.clear()
    config = {**settings.DJANGO_RATELIMITS, "POLICY_REFRESH": 3600}  # one log per interval
    with (
        override_settings(DJANGO_RATELIMITS=config),
        caplog.at_level(logging.ERROR, logger="django_ratelimits"),
    ):
        assert statuses(client, "/drf/shared", 3) == [200] * 3
    errors = [r for r in caplog.records if "drf-shared" in r.getMessage()]
    assert len(errors) == 1
    policy(name="drf-shared", rates="1/m", enabled=False)
    assert statuses(client, "/drf/shared", 2) == [200] * 2


def test_redis_down_fails_open_or_closed_as_the_policy_says(api: Any) -> None:
    policy(name="drf-api", rates="1/m")
    policy(name="drf-login", rates="100/m", fail_closed=True)
    with override_settings(DJANGO_RATELIMITS=DEAD):
        assert statuses(Client(), "/drf/api", 3) == [200] * 3
        refused = Client().get("/drf/login")
        assert refused.status_code == 429
        assert int(refused["Retry-After"]) == 5  # the breaker's cooldown


def test_disabled_limiting_throttles_nothing(api: Any) -> None:
    policy(name="drf-api", rates="1/m")
    with override_settings(DJANGO_RATELIMITS={**settings.DJANGO_RATELIMITS, "ENABLED": False}):
        assert statuses(Client(), "/drf/api", 3) == [200] * 3


def _open_breaker() -> None:
    """Open the circuit breaker, as requests that met a dead Redis meanwhile would."""
    from django_ratelimits.breaker import breaker
    from django_ratelimits.engine.errors import BackendError

    for _ in range(get_settings().breaker_failures):
        breaker.failure(BackendError("another request's timeout"))


def _decided_by_the_middleware(path: str, *names: str) -> Any:
    """A DRF request whose Django request the middleware decided (``names``) already."""
    django_request = RequestFactory().get(path)
    django_request.ratelimit = decide(  # type: ignore[attr-defined]
        django_request, [get_registry().get(n) for n in names]
    )
    return Request(django_request)


def test_a_fail_closed_throttle_after_the_middleware_decided_waits_the_cooldown(
    api: Any,
) -> None:
    """The middleware decided a site-wide policy; Redis failed before the throttle
    decided its fail-closed policy (here the breaker opened meanwhile): the 429 said
    ``Retry-After: 1``, since the request's verdict held a decision (the middleware's),
    where the docs and a throttle alone say ``BREAKER_COOLDOWN``."""
    policy(name="site", rates="100/m", path=r"^/drf/")
    policy(name="drf-login", rates="100/m", fail_closed=True)
    request = _decided_by_the_middleware("/drf/login", "site")
    assert request._request.ratelimit.decision is not None  # Redis answered the middleware
    _open_breaker()
    throttle = LoginThrottle()
    assert throttle.allow_request(request, drf_login) is False
    assert throttle.wait() == math.ceil(get_settings().breaker_cooldown) == 5


def test_a_fail_closed_throttle_that_redis_answered_is_not_refused_for_another_failure(
    api: Any,
) -> None:
    """The middleware's call failed (the breaker was open) for a fail-open policy, then
    Redis answered the throttle's own call, which allowed the request: the fail-closed
    throttle refused it all the same, because the request's verdict kept the
    middleware's failure and took it for its policy's."""
    from django_ratelimits.breaker import breaker

    policy(name="site", rates="100/m", path=r"^/drf/")
    policy(name="drf-login", rates="100/m", fail_closed=True)
    _open_breaker()
    request = _decided_by_the_middleware("/drf/login", "site")
    assert request._request.ratelimit.error is not None  # fails open: the middleware let it by
    breaker.success()  # another request's trial found Redis back
    throttle = LoginThrottle()
    assert throttle.allow_request(request, drf_login) is True
    assert request._request.ratelimit.results  # Redis decided drf-login
