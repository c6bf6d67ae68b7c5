"""Escalating bans through whole requests: the middleware refuses a banned client,
the dashboard and the command show the ban and lift it (test client, real Redis,
the site's engine on a fake clock)."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from django_ratelimits.engine import Identity, get_engine
from django_ratelimits.engine.controls import Controls
from django_ratelimits.models import Policy
from django_ratelimits.policies import get_registry
from django_ratelimits.testing import FakeClock
from tests.dashboard.test_dashboard import act, detail_url
from tests.operations.test_command import run, run_json

pytestmark = pytest.mark.django_db
ME = Identity("ip", "127.0.0.1")  # the test client's address


@pytest.fixture
def banning(frozen_clock: FakeClock) -> FakeClock:
    """One request a minute on /api/; 2 denials within 10 minutes ban for an hour,
    doubling up to 4 hours."""
    Policy.objects.create(
        name="api",
        rates="1/m",
        path="^/api/",
        algorithm="fixed_window",
        ban_after=2,
        ban_within="10m",
        ban_for="1h",
        ban_max="4h",
    )
    get_registry().refresh()
    return frozen_clock


def get_banned(client: Client) -> None:
    assert [client.get("/api/hello").status_code for _ in range(3)] == [200, 429, 429]


def test_a_banned_client_is_refused_with_the_ban_s_retry_after(banning: FakeClock) -> None:
    client = Client()
    get_banned(client)
    banning.advance(120)  # the rate would allow again
    refused = client.get("/api/hello")
    assert refused.status_code == 429
    assert refused["Retry-After"] == str(3600 - 120)
    banning.advance(3600 - 120 - 1)
    assert client.get("/api/hello").status_code == 429
    banning.advance(1)
    assert client.get("/api/hello").status_code == 200


def test_one_denial_less_does_not_ban(banning: FakeClock) -> None:
    client = Client()
    assert [client.get("/api/hello").status_code for _ in range(2)] == [200, 429]
    banning.advance(60)
    assert client.get("/api/hello").status_code == 200


def test_the_dashboard_shows_the_ban_and_lifts_it(banning: FakeClock, admin_client: Client) -> None:
    client = Client()
    get_banned(client)
    blocks = admin_client.get(reverse("admin:django_ratelimits_blocks")).content.decode()
    assert "banned (level 1)" in blocks and "automatic: the ban of api" in blocks
    detail = admin_client.get(detail_url("ip", ME.value)).content.decode()
    assert "banned (level 1), 1 h left" in detail
    act(admin_client, kind="ip", value=ME.value, action="lift", back="blocks")
    assert Controls(get_engine()).override(ME) is None
    banning.advance(60)
    assert client.get("/api/hello").status_code == 200


def test_the_command_shows_the_ban_and_lifts_it(banning: FakeClock) -> None:
    client = Client()
    get_banned(client)
    line = next(line for line in run("offenders").splitlines() if ME.value in line)
    assert "banned (level 1), 1h left" in line
    lifted = run_json("lift", f"ip:{ME.value}")["lifted"]
    assert lifted == {"mode": "blocked", "seconds_left": 3600, "ban_level": 1}
    banning.advance(60)
    assert client.get("/api/hello").status_code == 200


def test_the_second_ban_is_twice_as_long(banning: FakeClock) -> None:
    client = Client()
    get_banned(client)
    banning.advance(3600)
    get_banned(client)
    override = Controls(get_engine()).override(ME)
    assert override is not None and (override.level, override.seconds) == (2, 7200)
