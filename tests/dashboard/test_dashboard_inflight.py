"""An identity's page shows a concurrency policy as "N/concurrent", its free slots as
what remains: how many of its requests are in flight."""

from __future__ import annotations

import re
from typing import Any

from django.test import Client

from django_ratelimits.engine import Check, Identity, get_engine
from django_ratelimits.models import Policy
from django_ratelimits.policies import current, get_registry
from tests.dashboard.test_dashboard import detail_url

IP = "203.0.113.55"


def test_the_detail_shows_the_slots_in_flight(site_redis: Any, admin_client: Client) -> None:
    Policy.objects.create(name="uploads", algorithm="concurrency", rates="3", path="^/up/")
    get_registry().refresh()
    uploads = current().get("uploads")
    assert uploads is not None
    held = get_engine().check([Check(Identity("ip", IP), uploads.limits)])
    assert held.allowed

    page = admin_client.get(detail_url("ip", IP)).content.decode()
    row = re.search(
        r'<tr class="quota[^"]*" data-policy="uploads" data-rate="([^"]+)".*?'
        r'rl-remaining">([^<]+)<',
        page,
        re.S,
    )
    assert row is not None
    assert row.groups() == ("3/concurrent", "2 of 3")

    get_engine().release(held.held[0])
    page = admin_client.get(detail_url("ip", IP)).content.decode()
    assert 'data-policy="uploads" data-rate="3/concurrent"' in page
    assert re.search(r'data-policy="uploads".*?rl-remaining">3 of 3<', page, re.S)
