"""The log line of a block found by a call that refuses nothing, on real Redis.

A compat look (``is_ratelimited(increment=False)``, ``get_usage``) of a blocked identity
refuses nothing: its line says it looked, never that it refused; the view deciding on
its answer (the peek-first login) still leaves a trail. So does a view whose policies
are applied with ``block=False``: the request goes on, and its line says so; and so does
a compat charge whose caller decides (``@ratelimit(block=False)``, ``is_ratelimited`` and
``get_usage`` with ``increment=True``). A failed login's charge that finds a block logs
nothing: its look let the login through, and the next look logs the refusal.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

import pytest
from django.http import HttpRequest, HttpResponse
from django.test import Client, RequestFactory, override_settings
from django.urls import path
from prometheus_client import CollectorRegistry

from django_ratelimits.compat import Ratelimited, get_usage, is_ratelimited, ratelimit
from django_ratelimits.decorators import ratelimit as policy_ratelimit
from django_ratelimits.engine import Identity, get_engine
from django_ratelimits.engine.controls import Controls
from django_ratelimits.logins import BACKEND
from django_ratelimits.metrics import observing
from django_ratelimits.metrics.prometheus import PREFIX, PrometheusMetrics
from django_ratelimits.models import Policy
from django_ratelimits.policies import get_registry
from django_ratelimits.signals import rate_limited

pytestmark = pytest.mark.django_db

ADDRESS = "203.0.113.9"
OPTIONS: dict[str, Any] = {"group": "peek-first", "key": "ip", "rate": "5/m"}


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "django_ratelimits" and "is blocked (by" in r.getMessage()
    ]


def test_a_look_at_a_blocked_address_logs_a_look_and_a_refusal_a_refusal(
    site_redis: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """django-ratelimit's peek-first login: look with ``increment=False``, refuse on its
    answer. Both looks (Redis answers the first, the cache of denials may answer the
    second) log that they looked at a blocked address, at INFO as a refusal; a counted
    request the decorator refuses logs the refusal."""
    Controls(get_engine()).block(Identity("ip", ADDRESS), 300)
    request = RequestFactory().post("/login", REMOTE_ADDR=ADDRESS)
    seen: list[Any] = []
    rate_limited.connect(lambda **kw: seen.append(kw), weak=False, dispatch_uid="t-looked")
    try:
        with caplog.at_level(logging.INFO, logger="django_ratelimits"):
            assert is_ratelimited(request, **OPTIONS)
            usage = get_usage(request, **OPTIONS)
            assert usage is not None and usage["should_limit"]
            looked = lines(caplog)
            caplog.clear()

            @ratelimit(**OPTIONS)
            def view(request: Any) -> None:
                raise AssertionError("refused before the view")

            with pytest.raises(Ratelimited):
                view(RequestFactory().post("/login", REMOTE_ADDR=ADDRESS))
            refused = lines(caplog)
    finally:
        rate_limited.disconnect(dispatch_uid="t-looked")
    assert len(looked) == 2
    for line in looked:
        assert line.startswith(f"looked at POST /login: ip:{ADDRESS} is blocked (by staff")
        assert line.endswith("UTC; a look refuses nothing itself (the view decides)")
    assert [line.partition(":")[0] for line in refused] == ["refused POST /login"]
    assert len(seen) == 1  # the refusal; the looks refused nothing
    levels = {r.levelno for r in caplog.records if "is blocked (by" in r.getMessage()}
    assert levels == {logging.INFO}


class BlockingBackend:
    """Checks no password: staff block the username tried while it is being checked (a
    block that lands between a login's look and its failure's charge)."""

    def authenticate(self, request: Any, username: str | None = None, **_: Any) -> None:
        Controls(get_engine()).block(Identity("username", str(username)), 300)

    def get_user(self, user_id: int) -> None:
        return None


def test_a_failed_logins_charge_that_finds_a_block_logs_no_refusal(
    site_redis: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The login was let through by its look and failed on its password (401): its charge
    meets the block staff set meanwhile, and refuses nothing. The next login's look is
    the refusal, logged as one."""
    row = Policy(name="logins", rates="3/15m", counts="failed_logins", key="username")
    row.full_clean()
    row.save()
    get_registry().refresh()
    backends = [BACKEND, "tests.request.test_looks_logged.BlockingBackend"]

    def attempt() -> int:
        body = json.dumps({"username": "alice", "password": "wrong"})
        client = Client(REMOTE_ADDR=ADDRESS)
        return int(client.post("/json-login", body, content_type="application/json").status_code)

    settings = {"ROOT_URLCONF": "tests.login_urls", "AUTHENTICATION_BACKENDS": backends}
    with override_settings(**settings), caplog.at_level(logging.INFO, logger="django_ratelimits"):
        assert attempt() == 401
        charged = lines(caplog)
        assert attempt() == 429
    assert charged == []
    [line] = lines(caplog)
    assert line.startswith("refused POST /json-login: username:alice is blocked (by staff")


@policy_ratelimit("lk-soft", rate="5/m", key="ip", block=False)
def told(request: HttpRequest) -> HttpResponse:
    return HttpResponse("told")


@policy_ratelimit("lk-hard", rate="5/m", key="ip")
@policy_ratelimit("lk-soft", rate="5/m", key="ip", block=False)
def refusing(request: HttpRequest) -> HttpResponse:
    return HttpResponse("refusing")


urlpatterns = [path("told", told), path("refusing", refusing)]


@pytest.mark.parametrize("cache", [0, 10_000])
def test_a_block_only_block_false_policies_find_is_logged_as_let_through(
    site_redis: Any, caplog: pytest.LogCaptureFixture, cache: int
) -> None:
    """A view whose only policy is applied with ``block=False`` runs for a blocked address
    (the view decides): the line says the request was let through, never refused. A view
    that also applies a policy that refuses is refused, and logged so. With or without
    the cache of denials (which answers the repeats)."""
    from django.conf import settings

    Controls(get_engine()).block(Identity("ip", ADDRESS), 300)
    options = {**settings.DJANGO_RATELIMITS, "DENIAL_CACHE": cache}
    client = Client(REMOTE_ADDR=ADDRESS)
    with (
        override_settings(ROOT_URLCONF=__name__, DJANGO_RATELIMITS=options),
        caplog.at_level(logging.INFO, logger="django_ratelimits"),
    ):
        get_registry().refresh()
        assert [client.get("/told").status_code for _ in range(2)] == [200, 200]
        told_lines = lines(caplog)
        caplog.clear()
        assert client.get("/refusing").status_code == 429
        refused = lines(caplog)
    assert len(told_lines) == 2
    for line in told_lines:
        assert line.startswith(f"let through GET /told: ip:{ADDRESS} is blocked (by staff")
        assert line.endswith("; its policies here refuse nothing (block=False: the view decides)")
    assert [line.partition(":")[0] for line in refused] == ["refused GET /refusing"]


COUNTED: dict[str, Any] = {"group": "counted", "key": "ip", "rate": "5/m"}
BLOCKED = f"GET /counted: ip:{ADDRESS} is blocked (by staff or a ban) until "


def compat_view(block: bool, asynchronous: bool) -> Callable[[HttpRequest], bool]:
    """A view under the compat ``@ratelimit(block=block)``, sync or async, called: whether
    it ran (False: the decorator refused it)."""

    @ratelimit(**COUNTED, block=block)
    def view(request: HttpRequest) -> HttpResponse:
        return HttpResponse("ran")

    @ratelimit(**COUNTED, block=block)
    async def async_view(request: HttpRequest) -> HttpResponse:
        return HttpResponse("ran")

    def called(request: HttpRequest) -> bool:
        try:
            if asynchronous:
                asyncio.run(async_view(request))
            else:
                view(request)
        except Ratelimited:
            return False
        return True

    return called


def counted_twice(
    call: Callable[[HttpRequest], object], cache: int, caplog: pytest.LogCaptureFixture
) -> tuple[list[object], list[str], int, float | None]:
    """``call`` twice for a blocked address (the cache of denials, if on, may answer the
    second): what it returned, the lines logged, the ``rate_limited`` signals sent and the
    denials the metrics counted."""
    from django.conf import settings

    Controls(get_engine()).block(Identity("ip", ADDRESS), 300)
    seen: list[Any] = []
    rate_limited.connect(lambda **kw: seen.append(kw), weak=False, dispatch_uid="t-counted")
    registry = CollectorRegistry()
    options = {**settings.DJANGO_RATELIMITS, "DENIAL_CACHE": cache}
    try:
        with (
            override_settings(DJANGO_RATELIMITS=options),
            observing(PrometheusMetrics(registry)),
            caplog.at_level(logging.INFO, logger="django_ratelimits"),
        ):
            returned = [call(RequestFactory().get("/counted", REMOTE_ADDR=ADDRESS)) for _ in "12"]
    finally:
        rate_limited.disconnect(dispatch_uid="t-counted")
    labels = {"policy": "counted", "outcome": "denied"}
    denied = registry.get_sample_value(f"{PREFIX}_decisions_total", labels)
    return returned, lines(caplog), len(seen), denied


@pytest.mark.parametrize("cache", [0, 10_000])
@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_a_compat_decorator_logs_a_refusal_only_when_it_refuses(
    site_redis: Any, caplog: pytest.LogCaptureFixture, asynchronous: bool, cache: int
) -> None:
    """The compat ``@ratelimit`` (sync or async view) refuses a blocked address with
    ``block=True``, and logs the refusal. With ``block=False`` the view runs and decides
    from ``request.limited``: the line says the request was let through. Both send
    ``rate_limited`` and count a denial, as before."""
    refusing = counted_twice(compat_view(True, asynchronous), cache, caplog)
    caplog.clear()
    letting = counted_twice(compat_view(False, asynchronous), cache, caplog)
    ran, refused, signalled, denied = refusing
    assert ran == [False, False] and signalled == 2 and denied == 2
    assert len(refused) == 2
    for line in refused:
        assert line.startswith(f"refused {BLOCKED}") and line.endswith(" UTC")
    ran, let_through, signalled, denied = letting
    assert ran == [True, True] and signalled == 2 and denied == 2
    assert len(let_through) == 2
    for line in let_through:
        assert line.startswith(f"let through {BLOCKED}")
        assert line.endswith(" UTC; a count refuses nothing itself (its caller decides)")


@pytest.mark.parametrize("cache", [0, 10_000])
@pytest.mark.parametrize("function", [is_ratelimited, get_usage])
def test_a_compat_count_whose_caller_decides_logs_a_let_through(
    site_redis: Any, caplog: pytest.LogCaptureFixture, function: Any, cache: int
) -> None:
    """``is_ratelimited`` and ``get_usage`` with ``increment=True`` count the request and
    answer that it is limited; they refuse nothing (the caller decides on the answer), so
    the line of a blocked address says it was let through, never refused. Each still
    sends ``rate_limited`` and counts a denial."""

    def limited(request: HttpRequest) -> bool:
        answer = function(request, **COUNTED, increment=True)
        return bool(answer if function is is_ratelimited else answer["should_limit"])

    answers, let_through, signalled, denied = counted_twice(limited, cache, caplog)
    assert answers == [True, True] and signalled == 2 and denied == 2
    assert len(let_through) == 2
    for line in let_through:
        assert line.startswith(f"let through {BLOCKED}")
        assert line.endswith(" UTC; a count refuses nothing itself (its caller decides)")
