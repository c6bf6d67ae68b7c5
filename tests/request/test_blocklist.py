"""Blocked networks through whole requests: refused with 403 before any Redis call.

The registry's two clocks are the test's: the monotonic one decides when
``POLICY_REFRESH`` has passed (edits reach the worker), the wall one when entries
expire. Nothing sleeps.
"""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.http import HttpRequest, HttpResponse
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext

from django_ratelimits import blocklist, responses
from django_ratelimits.models import BlockedNetwork, Policy
from django_ratelimits.policies import get_registry
from django_ratelimits.signals import network_blocked
from tests.engine_helpers import check_calls

pytestmark = [
    pytest.mark.django_db,
    # The door is before Redis: one topology shows it (the stopped-server test needs this one).
    pytest.mark.parametrize("redis_client", ["standalone"], indirect=True),
]

JSON = {"Accept": "application/json"}
NOW = 1_800_000_000.0  # the wall clock's start, in seconds since the epoch


@dataclass
class Clocks:
    monotonic: float = 1000.0
    wall: float = NOW


@pytest.fixture
def clocks(site_redis: Any, monkeypatch: pytest.MonkeyPatch) -> Clocks:
    clocks = Clocks()
    registry = get_registry()
    monkeypatch.setattr(registry, "_clock", lambda: clocks.monotonic)
    monkeypatch.setattr(registry, "wall_clock", lambda: clocks.wall)
    monkeypatch.setattr(blocklist, "clock", lambda: clocks.monotonic)
    monkeypatch.setattr(blocklist, "_logged", {})
    registry.refresh()
    return clocks


def block(network: str, *, refresh: bool = True, **fields: Any) -> BlockedNetwork:
    entry = BlockedNetwork(network=network, **fields)
    entry.full_clean()
    entry.save()
    if refresh:
        get_registry().refresh()
    return entry


def at(seconds: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)


def test_a_blocked_ipv4_network_is_refused_everywhere_with_403(clocks: Clocks) -> None:
    block("203.0.113.0/24", reason="scraper")
    inside = Client(REMOTE_ADDR="203.0.113.77")
    # A path no policy covers, a decorated view, a view with block=False: all refused.
    assert inside.get("/api/hello").status_code == 403
    assert inside.post("/login").status_code == 403
    assert inside.get("/soft").status_code == 403
    assert inside.get("/no-such-page").status_code == 403
    assert Client(REMOTE_ADDR="203.0.114.1").get("/api/hello").status_code == 200


def test_the_refusal_makes_no_redis_call_nor_a_query(clocks: Clocks, site_redis: Any) -> None:
    Policy.objects.create(name="api", rates="100/m", path=r"^/api/")
    block("203.0.113.0/24")
    Client(REMOTE_ADDR="198.51.100.1").get("/api/hello")  # the script is loaded
    before = check_calls(site_redis)
    with CaptureQueriesContext(connection) as queries:
        blocked = Client(REMOTE_ADDR="203.0.113.5").get("/api/hello", headers=JSON)
    assert blocked.status_code == 403
    assert check_calls(site_redis) == before
    assert len(queries) == 0  # nor a database query: the registry's index answered
    assert Client(REMOTE_ADDR="198.51.100.1").get("/api/hello").status_code == 200
    assert check_calls(site_redis) == before + 1


def test_blocked_while_redis_is_down_and_others_fail_open(
    clocks: Clocks, request: pytest.FixtureRequest
) -> None:
    Policy.objects.create(name="api", rates="100/m", path=r"^/api/")
    block("203.0.113.0/24")
    get_registry().refresh()
    server = request.getfixturevalue("redis_standalone")
    server.stop()
    try:
        assert Client(REMOTE_ADDR="203.0.113.5").get("/api/hello").status_code == 403
        assert Client(REMOTE_ADDR="198.51.100.1").get("/api/hello").status_code == 200
    finally:
        server.start()


def test_ipv6_networks_and_single_addresses(clocks: Clocks) -> None:
    block("2001:db8::/32")
    block("2001:db9::7")  # one address: a /128
    assert Client(REMOTE_ADDR="2001:db8:ffff::1").get("/api/hello").status_code == 403
    assert Client(REMOTE_ADDR="2001:db9::7").get("/api/hello").status_code == 403
    assert Client(REMOTE_ADDR="2001:db9::8").get("/api/hello").status_code == 200
    assert Client(REMOTE_ADDR="2001:dba::1").get("/api/hello").status_code == 200


def test_an_ipv4_mapped_client_matches_the_ipv4_entry_and_the_other_way_round(
    clocks: Clocks,
) -> None:
    block("203.0.113.0/24")
    block("::ffff:198.51.100.0/120")  # stored as 198.51.100.0/24
    assert BlockedNetwork.objects.filter(network="198.51.100.0/24").exists()
    assert Client(REMOTE_ADDR="::ffff:203.0.113.5").get("/api/hello").status_code == 403
    assert Client(REMOTE_ADDR="198.51.100.9").get("/api/hello").status_code == 403
    assert Client(REMOTE_ADDR="::ffff:198.51.100.9").get("/api/hello").status_code == 403
    assert Client(REMOTE_ADDR="::ffff:192.0.2.1").get("/api/hello").status_code == 200


def test_a_forged_x_forwarded_for_cannot_escape_nor_frame_another(clocks: Clocks) -> None:
    block("203.0.113.0/24")
    forged = {"X-Forwarded-For": "192.0.2.1"}
    # No trusted proxy: the header is not believed.
    assert Client(REMOTE_ADDR="203.0.113.5").get("/api/hello", headers=forged).status_code == 403
    framing = {"X-Forwarded-For": "203.0.113.5"}
    assert Client(REMOTE_ADDR="192.0.2.9").get("/api/hello", headers=framing).status_code == 200
    config = {**_limits(), "TRUSTED_PROXIES": ["10.0.0.0/8"]}
    with override_settings(DJANGO_RATELIMITS=config):
        proxy = Client(REMOTE_ADDR="10.0.0.1")
        # Behind a trusted proxy the client is the right-most untrusted entry...
        assert proxy.get("/api/hello", headers=framing).status_code == 403
        # ...so a blocked client prepending a clean address is still itself,
        escape = {"X-Forwarded-For": "192.0.2.1, 203.0.113.5"}
        assert proxy.get("/api/hello", headers=escape).status_code == 403
        # and what it writes on the left names nobody.
        left = {"X-Forwarded-For": "203.0.113.5, 192.0.2.1"}
        assert proxy.get("/api/hello", headers=left).status_code == 200


def test_an_entry_stops_at_its_expiry_without_an_edit_or_a_refresh(clocks: Clocks) -> None:
    block("203.0.113.0/24", expires_at=at(NOW + 60))
    block("203.0.113.128/25", expires_at=at(NOW + 120))
    low, high = Client(REMOTE_ADDR="203.0.113.5"), Client(REMOTE_ADDR="203.0.113.200")
    clocks.wall = NOW + 59.9
    assert [low.get("/api/hello").status_code, high.get("/api/hello").status_code] == [403, 403]
    clocks.wall = NOW + 60
    assert [low.get("/api/hello").status_code, high.get("/api/hello").status_code] == [200, 403]
    assert len(get_registry().blocklist) == 1  # pruned at its next expiry
    clocks.wall = NOW + 120
    assert high.get("/api/hello").status_code == 200
    assert len(get_registry().blocklist) == 0


def test_an_edit_reaches_the_worker_within_policy_refresh(clocks: Clocks) -> None:
    client = Client(REMOTE_ADDR="203.0.113.5")
    with override_settings(DJANGO_RATELIMITS={**_limits(), "POLICY_REFRESH": 0.5}):
        get_registry().refresh()
        entry = block("203.0.113.0/24", refresh=False)
        assert client.get("/api/hello").status_code == 200  # not stale yet: no query made
        clocks.monotonic += 0.5
        assert client.get("/api/hello").status_code == 403
        BlockedNetwork.objects.filter(pk=entry.pk).update(enabled=False)  # a bulk edit
        assert client.get("/api/hello").status_code == 403
        clocks.monotonic += 0.5
        assert client.get("/api/hello").status_code == 200
        BlockedNetwork.objects.filter(pk=entry.pk).update(enabled=True)
        entry.delete()
        clocks.monotonic += 0.5
        assert client.get("/api/hello").status_code == 200


def test_staff_are_refused_too_and_allow_listed_networks_do_not_exempt(clocks: Clocks) -> None:
    Policy.objects.create(
        name="api", rates="100/m", path=r"^/api/", exempt_staff=True, allow_cidrs="203.0.113.0/24"
    )
    block("203.0.113.0/24")
    staff = User.objects.create_user("boss", password="pw", is_staff=True, is_superuser=True)
    client = Client(REMOTE_ADDR="203.0.113.5")
    client.force_login(staff)
    assert client.get("/api/hello").status_code == 403


def test_api_clients_get_problem_details_without_the_reason(clocks: Clocks) -> None:
    block("203.0.113.0/24", reason="internal note: abuse ticket 42")
    client = Client(REMOTE_ADDR="203.0.113.5")
    problem = client.get("/api/hello", headers={"Accept": "application/json"})
    assert problem.status_code == 403
    assert problem["Content-Type"] == "application/problem+json"
    assert problem.json()["title"] == "Forbidden"
    assert "Retry-After" not in problem and "RateLimit" not in problem
    page = client.get("/api/hello", headers={"Accept": "text/html"})
    assert b"<h1>403 Forbidden</h1>" in page.content
    for response in (problem, page):
        assert b"ticket" not in response.content


def custom_403(request: HttpRequest, exception: blocklist.NetworkBlocked) -> HttpResponse:
    return HttpResponse(f"go away, {exception.entry.network}", status=451)


def test_the_response_is_overridable_like_the_429(clocks: Clocks) -> None:
    block("203.0.113.0/24")
    view = f"{__name__}.custom_403"
    with override_settings(DJANGO_RATELIMITS={**_limits(), "BLOCKED_RESPONSE_VIEW": view}):
        response = Client(REMOTE_ADDR="203.0.113.5").get("/api/hello")
    assert (response.status_code, response.content) == (451, b"go away, 203.0.113.0/24")


def test_a_blocked_response_view_that_cannot_be_imported_gives_the_403_not_a_500(
    clocks: Clocks, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(responses, "_unimportable", set())  # no earlier test's log counts
    block("203.0.113.0/24")
    view = "tests.urls.custom_492"  # a typo: names nothing (each refusal was a 500)
    with override_settings(DJANGO_RATELIMITS={**_limits(), "BLOCKED_RESPONSE_VIEW": view}):
        client = Client(REMOTE_ADDR="203.0.113.5", raise_request_exception=False)
        statuses = [client.get("/api/hello").status_code for _ in range(2)]
    assert statuses == [403, 403]
    assert any(
        "BLOCKED_RESPONSE_VIEW" in r.getMessage() and "cannot be imported" in r.getMessage()
        for r in caplog.records
    )


def test_the_decorator_refuses_without_the_middleware(clocks: Clocks) -> None:
    from django.conf import settings

    block("203.0.113.0/24")
    middleware = [m for m in settings.MIDDLEWARE if "RateLimitMiddleware" not in m]
    with override_settings(MIDDLEWARE=middleware):
        client = Client(REMOTE_ADDR="203.0.113.5")
        assert client.post("/login").status_code == 403
        assert client.get("/async").status_code == 403
        assert client.get("/api/hello").status_code == 200  # no decorator, no middleware


def test_enabled_false_turns_the_blocklist_off_too(clocks: Clocks) -> None:
    block("203.0.113.0/24")
    with override_settings(DJANGO_RATELIMITS={**_limits(), "ENABLED": False}):
        assert Client(REMOTE_ADDR="203.0.113.5").get("/api/hello").status_code == 200


def test_a_flood_logs_one_line_per_network_per_minute_and_signals_each_refusal(
    clocks: Clocks, caplog: pytest.LogCaptureFixture
) -> None:
    block("203.0.113.0/24", reason="scraper")
    client = Client(REMOTE_ADDR="203.0.113.5")
    sent: list[Any] = []
    network_blocked.connect(lambda **kw: sent.append(kw["entry"]), weak=False, dispatch_uid="t")
    try:
        with caplog.at_level(logging.WARNING, logger="django_ratelimits"):
            for _ in range(50):
                client.get("/api/hello\nforged log line")
            clocks.monotonic += blocklist.LOG_EVERY
            client.get("/api/hello")
    finally:
        network_blocked.disconnect(dispatch_uid="t")
    assert len(sent) == 51 and {str(e.network) for e in sent} == {"203.0.113.0/24"}
    lines = [r.getMessage() for r in caplog.records if "is blocked" in r.getMessage()]
    assert len(lines) == 2
    assert "203.0.113.0/24 is blocked (scraper)" in lines[0] and "\n" not in lines[0]
    assert lines[1].endswith("; 49 more refused since the last such line")


def test_an_async_receiver_hears_refusals_on_every_stack(clocks: Clocks) -> None:
    """``network_blocked`` reaches an ``async def`` receiver (Django 5+) from the async
    middleware and the async decorator too: sent there with ``send``, on the event loop,
    it raised (``async_to_sync`` in the loop's thread), and the refusal became a 500."""
    import asyncio

    from django.conf import settings
    from django.test import AsyncClient

    block("127.0.0.1/32")  # the test clients' address
    heard: list[str] = []

    async def receiver(sender: Any, **kwargs: Any) -> None:
        heard.append(str(kwargs["entry"].network))

    async def run(path: str) -> int:
        return (await AsyncClient(raise_request_exception=False).get(path)).status_code

    alone = [m for m in settings.MIDDLEWARE if "RateLimitMiddleware" not in m]
    network_blocked.connect(receiver, weak=False, dispatch_uid="t-async")
    try:
        assert Client(raise_request_exception=False).get("/api/hello").status_code == 403
        assert asyncio.run(run("/api/hello")) == 403  # the async middleware
        with override_settings(MIDDLEWARE=alone):
            assert asyncio.run(run("/async")) == 403  # the async decorator
    finally:
        network_blocked.disconnect(dispatch_uid="t-async")
    assert heard == ["127.0.0.1/32"] * 3


def _limits() -> dict[str, object]:
    from django.conf import settings

    return dict(settings.DJANGO_RATELIMITS)


def test_the_async_middleware_refuses_before_the_view(clocks: Clocks) -> None:
    import asyncio

    from django.test import RequestFactory

    from django_ratelimits.middleware import RateLimitMiddleware

    block("2001:db8::/32")
    reached: list[str] = []

    async def view(request: HttpRequest) -> HttpResponse:
        reached.append(request.META["REMOTE_ADDR"])
        return HttpResponse("ok")

    middleware = RateLimitMiddleware(view)
    assert middleware.async_mode

    async def call(address: str) -> int:
        request = RequestFactory().get("/api/hello", REMOTE_ADDR=address)
        response = await middleware(request)  # type: ignore[misc]
        return int(response.status_code)

    assert asyncio.run(call("2001:db8::1")) == 403
    assert asyncio.run(call("2001:db9::1")) == 200
    assert reached == ["2001:db9::1"]
