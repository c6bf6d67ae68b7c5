"""The log line of a block found by a call that refuses nothing, on real Redis.

A compat look (``is_ratelimited(increment=False)``, ``get_usage``) of a blocked identity
refuses nothing: its line says it looked, never that it refused; the view deciding on
its answer (the peek-first login) still leaves a trail. A failed login's charge that
finds a block logs nothing: its look let the login through, and the next look logs the
refusal.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from django.test import Client, RequestFactory, override_settings

from django_ratelimits.compat import Ratelimited, get_usage, is_ratelimited, ratelimit
from django_ratelimits.engine import Identity, get_engine
from django_ratelimits.engine.controls import Controls
from django_ratelimits.logins import BACKEND
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
