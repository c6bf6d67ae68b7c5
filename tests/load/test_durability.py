"""Nothing lost: policies live in the database, counters in Redis.

An edit made in admin is enforced, survives Redis going away and coming back
empty, can even be made while Redis is down, and is what a new process loads.
A Redis outage costs the counters (and offender records) and nothing else.
A failed admin save keeping the user's input is in ``tests/request/test_hostile.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from devtools.redis_harness import RedisServer
from django_ratelimits.models import Policy
from django_ratelimits.policies import PolicyRegistry, get_registry
from tests.dashboard.test_admin import change_url, form

pytestmark = pytest.mark.django_db


def _statuses(count: int) -> list[int]:
    client = Client(REMOTE_ADDR="192.0.2.44")
    return [client.get("/api/hello").status_code for _ in range(count)]


def _edit(admin_client: Client, policy: Policy, rates: str) -> None:
    response = admin_client.post(change_url(policy), form(rates=rates, algorithm="sliding_log"))
    assert response.status_code == 302, response.content.decode()[-2000:]
    get_registry().refresh()


@pytest.mark.parametrize("redis_client", ["standalone"], indirect=True)
def test_a_redis_outage_loses_counters_never_policies(
    site_redis: Any, redis_standalone: RedisServer, admin_client: Client
) -> None:
    policy = Policy.objects.create(name="api", rates="3/m", path="^/api/", algorithm="sliding_log")
    _edit(admin_client, policy, "2/m")
    assert _statuses(3) == [200, 200, 429]

    redis_standalone.stop()
    try:
        assert _statuses(2) == [200, 200]  # fails open (two: the breaker stays closed)
        changelist = admin_client.get("/admin/django_ratelimits/policy/")
        assert changelist.status_code == 200 and "2/m" in changelist.content.decode()
        _edit(admin_client, policy, "1/m")  # admin works without Redis
    finally:
        redis_standalone.start()  # empty: no persistence in the harness

    assert _statuses(2) == [
        200,
        429,
    ]  # the counters are gone, the edit made during the outage holds
    fresh = PolicyRegistry()  # what a new or restarted process loads
    fresh.refresh()
    spec = fresh.get("api")
    assert spec is not None and str(spec.limits[0].rate) == "1/m"
