"""django-ratelimit's settings under the drop-in: honoured, or refused by check E007
(issue #9, finding 9). Time stands still: a fake clock drives the engine."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.core.checks import CheckMessage, run_checks
from django.core.exceptions import PermissionDenied
from django.test import Client, override_settings

from django_ratelimits import compat
from django_ratelimits import decide as limiter_module
from django_ratelimits.checks import TAG
from django_ratelimits.compat import ALL, UNSAFE, Ratelimited, get_usage, is_ratelimited
from django_ratelimits.engine import Engine
from django_ratelimits.testing import FakeClock


class Throttled(PermissionDenied):
    """A project's own exception (RATELIMIT_EXCEPTION_CLASS)."""


class SlowDown(Ratelimited):
    """A project's own subclass of Ratelimited, which the middleware answers with 429."""


@pytest.fixture
def compat_site(site_redis: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Client]:
    """``tests.compat_urls`` (``/compat/ip`` allows 2 an hour) on an engine whose clock stands."""
    engine = Engine(site_redis, clock=FakeClock())
    monkeypatch.setattr(compat, "get_engine", lambda: engine)
    monkeypatch.setattr(limiter_module, "get_engine", lambda: engine)
    with override_settings(ROOT_URLCONF="tests.compat_urls"):
        yield Client()


def statuses(client: Client, n: int = 3) -> list[int]:
    return [client.get("/compat/ip").status_code for _ in range(n)]


def e007() -> list[CheckMessage]:
    return [m for m in run_checks(tags=[TAG]) if m.id == "django_ratelimits.E007"]


# --------------------------------------------------------------------------- honoured


def test_is_ratelimited_and_get_usage_carry_all_and_unsafe() -> None:
    assert is_ratelimited.ALL is ALL and is_ratelimited.UNSAFE is UNSAFE  # type: ignore[attr-defined]
    assert get_usage.ALL is ALL and get_usage.UNSAFE is UNSAFE  # type: ignore[attr-defined]


@pytest.mark.django_db
def test_ratelimit_enable_false_lets_every_request_through(compat_site: Client) -> None:
    with override_settings(RATELIMIT_ENABLE=False):
        assert statuses(compat_site) == [200, 200, 200]
    assert statuses(compat_site) == [200, 200, 429]


@pytest.mark.django_db
@pytest.mark.parametrize("setting", [Throttled, "tests.request.test_compat_settings.Throttled"])
def test_ratelimit_exception_class_is_raised_over_the_limit(
    compat_site: Client, setting: object
) -> None:
    with override_settings(RATELIMIT_EXCEPTION_CLASS=setting):
        assert statuses(compat_site) == [200, 200, 403]  # Django answers PermissionDenied


@pytest.mark.django_db
def test_a_ratelimited_subclass_as_exception_class_still_gets_429_and_retry_after(
    compat_site: Client,
) -> None:
    with override_settings(RATELIMIT_EXCEPTION_CLASS=SlowDown):
        statuses(compat_site, 2)
        refused = compat_site.get("/compat/ip")
    assert refused.status_code == 429 and 1 <= int(refused["Retry-After"]) <= 3600


# RATELIMIT_FAIL_OPEN through a request:
# tests/request/test_compat.py::test_redis_down_fails_open_unless_ratelimit_fail_open_is_false


# --------------------------------------------------------------------------- refused: E007


@pytest.mark.parametrize(
    ("setting", "value", "instead"),
    [
        ("RATELIMIT_IPV4_MASK", 24, "['IPV4_PREFIX'] = 24"),
        ("RATELIMIT_IPV6_MASK", 48, "['IPV6_PREFIX'] = 48"),
        ("RATELIMIT_IP_META_KEY", "HTTP_X_REAL_IP", "TRUSTED_PROXIES"),
        ("RATELIMIT_VIEW", "tests.urls.custom_429", "['RESPONSE_VIEW'] = 'tests.urls.custom_429'"),
    ],
)
def test_a_setting_compat_does_not_honour_is_an_error_naming_the_equivalent(
    setting: str, value: object, instead: str
) -> None:
    with override_settings(**{setting: value}):
        errors = e007()
    assert len(errors) == 1 and errors[0].is_serious()
    assert setting in errors[0].msg and instead in (errors[0].hint or "")


def test_settings_that_agree_with_django_ratelimits_pass() -> None:
    ours = {"IPV4_PREFIX": 24, "RESPONSE_VIEW": "tests.urls.custom_429"}
    with override_settings(
        DJANGO_RATELIMITS=ours,
        RATELIMIT_IPV4_MASK=24,
        RATELIMIT_IPV6_MASK=64,
        RATELIMIT_VIEW="tests.urls.custom_429",
        RATELIMIT_ENABLE=True,
        RATELIMIT_FAIL_OPEN=True,
        RATELIMIT_EXCEPTION_CLASS="tests.request.test_compat_settings.Throttled",
    ):
        assert e007() == []


def test_every_refused_setting_is_reported_in_one_run() -> None:
    with override_settings(
        RATELIMIT_IPV4_MASK=16, RATELIMIT_IP_META_KEY="HTTP_X_REAL_IP", RATELIMIT_VIEW="a.b"
    ):
        assert len(e007()) == 3
