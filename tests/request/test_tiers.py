"""Tiers and identity overrides through whole requests (Django test client, real Redis)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import AsyncClient, Client, override_settings

from django_ratelimits.conf import get_settings
from django_ratelimits.models import Policy, PolicyTier, RateOverride, spec_fields
from django_ratelimits.policies import get_registry
from django_ratelimits.testing import FakeClock
from tests import overrides_helpers

pytestmark = pytest.mark.django_db

NOW = 2_000_000_000.0  # the registry's wall clock in these tests (seconds since the epoch)


class Wall:
    """A wall clock for the registry: moves only when the test says so."""

    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def wall(frozen_clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> Wall:
    clock = Wall()
    monkeypatch.setattr(get_registry(), "wall_clock", clock)
    return clock


def api(**fields: Any) -> Policy:
    fields = {"name": "api", "rates": "2/h", "path": "^/api/", "algorithm": "fixed_window"} | fields
    return Policy.objects.create(**fields)


def override(ident: str, rates: str, *, policy: Policy | None, hours: float = 1) -> RateOverride:
    """An override in force ``hours`` after the test clock's start."""
    until = datetime.fromtimestamp(NOW, tz=UTC) + timedelta(hours=hours)
    return overrides_helpers.override(ident, rates, policy=policy, until=until)


def declared(name: str) -> Policy:
    """The row of a policy a decorator declares (its defaults), as admin would edit it."""
    spec = get_registry().get(name)
    assert spec is not None
    return Policy.objects.get_or_create(name=name, defaults=spec_fields(spec))[0]


def statuses(client: Client, n: int, path: str = "/api/hello", **extra: Any) -> list[int]:
    return [client.get(path, **extra).status_code for _ in range(n)]


def signed_in(username: str, *groups: str, **fields: Any) -> Client:
    user = User.objects.create_user(username, **fields)
    for name in groups:
        user.groups.add(Group.objects.get_or_create(name=name)[0])
    client = Client()
    client.force_login(user)
    return client


def test_a_pro_group_user_gets_the_tier_rates_and_a_free_user_the_policy_rates(
    wall: Wall,
) -> None:
    policy = api(key="user_or_ip")
    Group.objects.create(name="pro")
    PolicyTier.objects.create(policy=policy, match="group", name="pro", rates="5/h")
    get_registry().refresh()
    free, pro = signed_in("free"), signed_in("pro-user", "pro")
    assert free.get("/api/hello")["RateLimit-Policy"] == '"api";q=2;w=3600'
    assert pro.get("/api/hello")["RateLimit-Policy"] == '"api";q=5;w=3600'
    assert statuses(free, 2) == [200, 429]
    assert statuses(pro, 5) == [200, 200, 200, 200, 429]


def test_an_attribute_tier_matches_the_value_and_the_first_tier_wins(wall: Wall) -> None:
    policy = api(key="user")
    PolicyTier.objects.create(
        policy=policy, order=1, match="attribute", name="last_name", value="pro", rates="4/h"
    )
    PolicyTier.objects.create(
        policy=policy, order=2, match="attribute", name="last_name", value="pro", rates="9/h"
    )
    get_registry().refresh()
    pro = signed_in("p", last_name="pro")
    assert pro.get("/api/hello")["RateLimit-Policy"] == '"api";q=4;w=3600'
    assert signed_in("f", last_name="free").get("/api/hello")["RateLimit-Policy"] == (
        '"api";q=2;w=3600'
    )


def test_an_ip_override_lets_that_address_through_while_others_get_the_policy_rates(
    wall: Wall,
) -> None:
    override("ip:127.0.0.1", "10/h", policy=api())
    get_registry().refresh()
    client = Client()
    assert client.get("/api/hello")["RateLimit-Policy"] == '"api";q=10;w=3600'
    assert statuses(client, 9) == [200] * 9
    assert client.get("/api/hello").status_code == 429
    other = {"REMOTE_ADDR": "10.0.0.2"}
    assert statuses(client, 3, **other) == [200, 200, 429]


def test_an_override_wins_over_a_tier(wall: Wall) -> None:
    policy = api(key="user")
    Group.objects.create(name="pro")
    PolicyTier.objects.create(policy=policy, match="group", name="pro", rates="5/h")
    pro = signed_in("pro-user", "pro")
    override(f"user:{User.objects.get(username='pro-user').pk}", "7/h", policy=None)
    get_registry().refresh()
    assert pro.get("/api/hello")["RateLimit-Policy"] == '"api";q=7;w=3600'


def test_an_override_stops_at_its_expiry_without_an_edit(wall: Wall) -> None:
    override("ip:127.0.0.1", "10/h", policy=api(), hours=1)
    get_registry().refresh()
    client = Client()
    assert statuses(client, 3) == [200, 200, 200]
    wall.now += 3600  # the registry is not reloaded: the loaded override just ends
    response = client.get("/api/hello")
    assert response["RateLimit-Policy"] == '"api";q=2;w=3600'
    # The policy's own rate keeps its own state: 2 per hour from here.
    assert statuses(client, 2) == [200, 429]


def test_an_override_edit_reaches_requests_within_the_refresh_interval(
    wall: Wall, monkeypatch: pytest.MonkeyPatch
) -> None:
    row = override("ip:127.0.0.1", "10/h", policy=api())
    registry = get_registry()
    refresh_clock = Wall()
    monkeypatch.setattr(registry, "_clock", refresh_clock)
    registry.refresh()
    client = Client()
    assert client.get("/api/hello")["RateLimit-Policy"] == '"api";q=10;w=3600'
    row.rates = "3/h"
    row.save()
    assert client.get("/api/hello")["RateLimit-Policy"] == '"api";q=10;w=3600'  # not yet
    refresh_clock.now += get_settings().policy_refresh
    assert client.get("/api/hello")["RateLimit-Policy"] == '"api";q=3;w=3600'
    row.delete()
    refresh_clock.now += get_settings().policy_refresh
    assert client.get("/api/hello")["RateLimit-Policy"] == '"api";q=2;w=3600'


def test_an_api_key_gets_its_own_rates(wall: Wall) -> None:
    policy = api(key="header", key_arg="X-Api-Key", identity_budget="off")
    override("header:partner-key", "6/h", policy=policy)
    get_registry().refresh()
    client = Client()
    partner = {"HTTP_X_API_KEY": "partner-key"}
    assert client.get("/api/hello", **partner)["RateLimit-Policy"] == '"api";q=6;w=3600'
    assert statuses(client, 5, **partner) == [200] * 5
    assert client.get("/api/hello", **partner).status_code == 429
    assert statuses(client, 3, HTTP_X_API_KEY="other-key") == [200, 200, 429]


def test_the_decorator_path_uses_overrides_and_tiers(wall: Wall) -> None:
    # t-login (tests/urls.py) is a policy named by @ratelimit: 3/m per IP, POST only.
    Group.objects.create(name="pro")
    login = declared("t-login")
    PolicyTier.objects.create(policy=login, match="group", name="pro", rates="4/m")
    get_registry().refresh()
    pro = signed_in("pro-user", "pro")
    assert [pro.post("/login").status_code for _ in range(5)] == [200] * 4 + [429]
    override("ip:10.0.0.9", "1/m", policy=login)
    get_registry().refresh()
    assert [Client().post("/login", REMOTE_ADDR="10.0.0.9").status_code for _ in range(2)] == [
        200,
        429,
    ]


@pytest.mark.django_db(transaction=True)
def test_a_group_tier_through_the_async_stack_reads_groups_off_the_event_loop(
    wall: Wall,
) -> None:
    Group.objects.create(name="pro")
    tier = declared("t-async")  # 2/m per IP, by @ratelimit on an async view
    PolicyTier.objects.create(policy=tier, match="group", name="pro", rates="3/m")
    get_registry().refresh()
    user = User.objects.create_user("pro-user")
    user.groups.add(Group.objects.get(name="pro"))

    async def run() -> list[int]:
        client = AsyncClient()
        await client.aforce_login(user)
        return [(await client.get("/async")).status_code for _ in range(4)]

    assert asyncio.run(run()) == [200, 200, 200, 429]


def test_the_drf_throttle_uses_overrides(wall: Wall) -> None:
    row = Policy.objects.create(name="drf-api", rates="2/m", algorithm="fixed_window")
    override("ip:127.0.0.1", "4/m", policy=row)
    get_registry().refresh()
    with override_settings(ROOT_URLCONF="tests.compat_urls"):
        assert statuses(Client(), 5, "/drf/api") == [200] * 4 + [429]
        assert statuses(Client(REMOTE_ADDR="10.0.0.3"), 3, "/drf/api") == [200, 200, 429]
