"""HEAD is limited wherever GET is: Django runs the GET code for HEAD (issue #9, finding 2).

Each entry point limits a view to GET at 2 per hour; HEAD requests must count
with the GET ones and be refused past the limit. Time stands still (a fake
clock drives the engine), so no window can roll over during a test.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client, override_settings

from django_ratelimits import compat
from django_ratelimits import decide as limiter_module
from django_ratelimits.engine import Engine
from django_ratelimits.models import Policy
from django_ratelimits.policies import get_registry
from django_ratelimits.testing import FakeClock

pytestmark = pytest.mark.django_db


@pytest.fixture
def frozen(site_redis: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``tests.head_urls`` behind the middleware, on an engine whose clock never moves."""
    engine = Engine(site_redis, clock=FakeClock())
    monkeypatch.setattr(limiter_module, "get_engine", lambda: engine)
    monkeypatch.setattr(compat, "get_engine", lambda: engine)
    with override_settings(ROOT_URLCONF="tests.head_urls"):
        yield


def policy(**fields: Any) -> None:
    Policy.objects.create(**fields)
    get_registry().refresh()


def head_then_get(path: str) -> list[int]:
    client = Client()
    return [
        client.head(path).status_code,
        client.head(path).status_code,
        client.head(path).status_code,
        client.get(path).status_code,
    ]


def test_a_get_path_policy_counts_head_requests_and_refuses_them_past_the_limit(
    frozen: None,
) -> None:
    policy(name="head-path", rates="2/h", path=r"^/page", methods="GET")
    assert head_then_get("/page") == [200, 200, 429, 429]


def test_a_get_decorator_counts_head_requests_and_refuses_them_past_the_limit(
    frozen: None,
) -> None:
    assert head_then_get("/decorated") == [200, 200, 429, 429]


def test_a_get_decorator_counts_head_requests_without_the_middleware(frozen: None) -> None:
    from django.conf import settings

    plain = [m for m in settings.MIDDLEWARE if "django_ratelimits" not in m]
    with override_settings(MIDDLEWARE=plain):
        assert head_then_get("/decorated") == [200, 200, 429, 429]


def test_the_compat_decorator_on_get_counts_head_requests_and_refuses_them(frozen: None) -> None:
    assert head_then_get("/compat") == [200, 200, 429, 429]


def test_compat_is_ratelimited_on_get_counts_head_requests(frozen: None) -> None:
    assert head_then_get("/compat-fn") == [200, 200, 429, 429]


def test_a_drf_throttle_on_a_get_policy_counts_head_requests_and_refuses_them(
    frozen: None,
) -> None:
    policy(name="head-drf", rates="2/h", methods="GET")
    assert head_then_get("/drf") == [200, 200, 429, 429]


@pytest.mark.parametrize("path", ["/page", "/decorated", "/compat", "/compat-fn"])
def test_a_method_http_does_not_define_counts_under_a_get_limit(frozen: None, path: str) -> None:
    """A function view that does not check the method runs its GET code for ``FOO``
    too: a GET limit counts it, as it counts HEAD."""
    if path == "/page":
        policy(name="head-path", rates="2/h", path=r"^/page", methods="GET")
    client = Client()
    sent = [client.generic("FOO", path).status_code for _ in range(2)]
    assert [*sent, client.get(path).status_code] == [200, 200, 429]
    assert client.generic("PROPFIND", path).status_code == 429


@pytest.mark.parametrize("method", ["OPTIONS", "TRACE", "CONNECT"])
@pytest.mark.parametrize("path", ["/page", "/decorated", "/compat", "/compat-fn"])
def test_a_method_that_is_not_a_write_counts_under_a_get_limit(
    frozen: None, path: str, method: str
) -> None:
    """A function view answers OPTIONS, TRACE or CONNECT with its GET code (Django
    answers none of them for it): a GET limit counts them. Found by an attack review:
    OPTIONS gave the GET page past the limit."""
    if path == "/page":
        policy(name="head-path", rates="2/h", path=r"^/page", methods="GET")
    client = Client()
    first = client.generic(method, path)
    assert first.content in (b"page", b"decorated", b"compat", b"counted")  # the GET code
    sent = [first.status_code, client.generic(method, path).status_code]
    assert [*sent, client.get(path).status_code] == [200, 200, 429]


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
def test_writes_stay_outside_a_get_limit(frozen: None, method: str) -> None:
    policy(name="head-path", rates="2/h", path=r"^/page", methods="GET")
    client = Client()
    assert head_then_get("/page") == [200, 200, 429, 429]
    assert client.generic(method, "/page").status_code == 200
