"""The whole request path through Django's test client, against real Redis."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from django.test import Client, RequestFactory, override_settings

from django_ratelimits import responses
from django_ratelimits.decorators import ratelimit
from django_ratelimits.engine import Identity, get_engine
from django_ratelimits.engine.hits import Hit
from django_ratelimits.engine.offenders import OffenderReader
from django_ratelimits.models import Policy
from django_ratelimits.policies import get_registry
from django_ratelimits.policies.spec import Recording
from django_ratelimits.signals import backend_failed, rate_limited
from django_ratelimits.testing import FakeClock
from tests.engine_helpers import all_keys, check_calls

pytestmark = pytest.mark.django_db


def policy(**fields: Any) -> Policy:
    row = Policy.objects.create(**fields)
    get_registry().refresh()
    return row


def test_a_path_policy_is_enforced_exactly_at_the_limit(site_redis: Any) -> None:
    policy(name="api", rates="3/m", path=r"^/api/", algorithm="sliding_log")
    client = Client()
    statuses = [client.get("/api/hello").status_code for _ in range(5)]
    assert statuses == [200, 200, 200, 429, 429]
    # Another path under the same policy shares its quota; paths outside it do not.
    assert client.get("/api/other").status_code == 429
    assert client.get("/soft").status_code == 200


def test_headers_describe_the_decision(frozen_clock: FakeClock) -> None:
    # A fixed window on the fake clock: on Redis' clock a minute could end between the requests.
    policy(name="api", rates="2/m", path=r"^/api/", algorithm="fixed_window")
    client = Client()
    first = client.get("/api/hello")
    assert first["RateLimit-Policy"] == '"api";q=2;w=60'
    assert first["RateLimit"] == '"api";r=1;t=60'
    frozen_clock.advance(20)
    client.get("/api/hello")
    denied = client.get("/api/hello")
    assert denied.status_code == 429
    assert denied["Retry-After"] == "40"  # the rest of the minute
    assert denied["RateLimit"] == '"api";r=0;t=40'


def test_several_rates_are_named_per_period(site_redis: Any) -> None:
    policy(name="api", rates="10/s, 100/h", path=r"^/api/")
    response = Client().get("/api/hello")
    assert response["RateLimit-Policy"] == '"api-1s";q=10;w=1, "api-3600s";q=100;w=3600'
    assert response["RateLimit"].startswith('"api-1s";r=9;')


def test_json_clients_get_problem_details_and_browsers_a_page(site_redis: Any) -> None:
    policy(name="api", rates="1/m", path=r"^/api/")
    client = Client()
    client.get("/api/hello")
    problem = client.get("/api/hello", headers={"Accept": "application/json"})
    assert problem.status_code == 429
    assert problem["Content-Type"] == "application/problem+json"
    body = problem.json()
    assert body["status"] == 429 and body["title"] == "Too Many Requests"
    assert "rl:" not in problem.content.decode() and "{s" not in problem.content.decode()
    page = client.get("/api/hello", headers={"Accept": "text/html"})
    assert page.status_code == 429
    assert b"<h1>429 Too Many Requests</h1>" in page.content


@pytest.mark.parametrize("redis_client", ["standalone"], indirect=True)
def test_several_matching_policies_cost_one_round_trip(site_redis: Any) -> None:
    policy(name="api", rates="10/s, 120/m, 240/h", path=r"^/api/", key="ip_and_user")
    policy(name="api-burst", rates="5/s", path=r"^/api/hello", algorithm="gcra")
    policy(name="everything", rates="1000/h", path=r"^/", algorithm="fixed_window")
    client = Client()
    client.get("/api/hello")
    before = check_calls(site_redis)
    response = client.get("/api/hello")
    after = check_calls(site_redis)
    assert response.status_code == 200
    assert after - before == 1


def test_shadow_mode_counts_and_records_but_never_blocks(site_redis: Any) -> None:
    policy(name="watch", rates="1/m", path=r"^/api/", mode="shadow", record_metadata="every")
    seen: list[Any] = []
    rate_limited.connect(lambda **kw: seen.append(kw), weak=False, dispatch_uid="t-shadow")
    try:
        statuses = [Client().get("/api/hello").status_code for _ in range(4)]
    finally:
        rate_limited.disconnect(dispatch_uid="t-shadow")
    assert statuses == [200] * 4
    assert [s["shadow"] for s in seen] == [True] * 3
    assert "RateLimit" not in Client().get("/api/hello")


def test_staff_and_allow_listed_networks_are_exempt(site_redis: Any) -> None:
    policy(name="api", rates="1/m", path=r"^/api/", exempt_staff=True, allow_cidrs="10.1.0.0/16")
    staff = User.objects.create_user("staff", password="pw", is_staff=True)
    client = Client()
    client.force_login(staff)
    assert [client.get("/api/hello").status_code for _ in range(3)] == [200] * 3
    allowed = Client(REMOTE_ADDR="10.1.2.3")
    assert [allowed.get("/api/hello").status_code for _ in range(3)] == [200] * 3
    other = Client(REMOTE_ADDR="10.2.0.1")
    assert [other.get("/api/hello").status_code for _ in range(2)] == [200, 429]


def test_an_ipv4_mapped_allow_listed_network_exempts_its_ipv4_clients(site_redis: Any) -> None:
    policy(name="api", rates="1/m", path=r"^/api/", allow_cidrs="::ffff:10.1.0.0/112")
    for remote in ("10.1.2.3", "::ffff:10.1.2.4"):
        allowed = Client(REMOTE_ADDR=remote)
        assert [allowed.get("/api/hello").status_code for _ in range(3)] == [200] * 3


def test_an_allow_listed_single_ipv6_address_is_exempt_inside_its_64(site_redis: Any) -> None:
    policy(name="api", rates="1/m", path=r"^/api/", allow_cidrs="2001:db8::7/128")
    listed = Client(REMOTE_ADDR="2001:db8::7")
    assert [listed.get("/api/hello").status_code for _ in range(3)] == [200] * 3
    neighbour = Client(REMOTE_ADDR="2001:db8::8")  # same /64, not listed
    assert [neighbour.get("/api/hello").status_code for _ in range(2)] == [200, 429]


def test_forwarded_for_is_ignored_unless_from_a_trusted_proxy(site_redis: Any) -> None:
    policy(name="api", rates="1/m", path=r"^/api/")
    spoofer = Client(REMOTE_ADDR="198.51.100.1")
    assert spoofer.get("/api/hello", headers={"X-Forwarded-For": "1.2.3.4"}).status_code == 200
    assert spoofer.get("/api/hello", headers={"X-Forwarded-For": "5.6.7.8"}).status_code == 429
    config = {"REDIS": _redis_setting(), "TRUSTED_PROXIES": ["198.51.100.0/24"]}
    with override_settings(DJANGO_RATELIMITS=config):
        proxy = Client(REMOTE_ADDR="198.51.100.1")
        assert proxy.get("/api/hello", headers={"X-Forwarded-For": "1.2.3.4"}).status_code == 200
        assert proxy.get("/api/hello", headers={"X-Forwarded-For": "1.2.3.4"}).status_code == 429
        assert proxy.get("/api/hello", headers={"X-Forwarded-For": "5.6.7.8"}).status_code == 200


def _redis_setting() -> object:
    from django.conf import settings

    return settings.DJANGO_RATELIMITS["REDIS"]


def test_decorated_view_through_the_middleware(site_redis: Any) -> None:
    client = Client()
    assert [client.post("/login").status_code for _ in range(4)] == [200, 200, 200, 429]
    assert client.get("/login").status_code == 200  # only POST is limited


def test_decorator_defaults_create_the_row_and_work_without_middleware(site_redis: Any) -> None:
    @ratelimit("t-fresh", rate="2/h", key="ip", methods=["POST"], algorithm="gcra")
    def view(request: HttpRequest) -> HttpResponse:
        return HttpResponse("ok")

    get_registry().refresh()
    row = Policy.objects.get(name="t-fresh")
    assert (row.rates, row.methods, row.algorithm, row.key) == ("2/h", "POST", "gcra", "ip")
    factory = RequestFactory()
    statuses = [view(factory.post("/anything")).status_code for _ in range(3)]
    assert statuses == [200, 200, 429]
    assert view(factory.get("/anything")).status_code == 200


def test_the_database_row_wins_over_code_defaults(site_redis: Any) -> None:
    Policy.objects.create(name="t-login", rates="1/m", methods="POST")
    get_registry().refresh()
    client = Client()
    assert [client.post("/login").status_code for _ in range(2)] == [200, 429]
    Policy.objects.filter(name="t-login").update(enabled=False)
    get_registry().refresh()
    assert client.post("/login").status_code == 200


def test_block_false_lets_the_view_decide(site_redis: Any) -> None:
    client = Client()
    assert client.get("/soft").json() == {"limited": False}
    assert client.get("/soft").json() == {"limited": True}


def test_class_based_views_count_per_user(site_redis: Any) -> None:
    alice = Client()
    alice.force_login(User.objects.create_user("alice"))
    bob = Client()
    bob.force_login(User.objects.create_user("bob"))
    assert [alice.get("/cbv").status_code for _ in range(3)] == [200, 200, 429]
    assert bob.get("/cbv").status_code == 200


def test_async_class_based_views_count_per_user_without_the_middleware(site_redis: Any) -> None:
    """An async class-based view decorated through ``method_decorator(name="dispatch")``
    is decided as an async view: off the event loop, where the lazy ``request.user`` may
    be read. Taken for a sync view, it read the user on the loop: a 500
    (SynchronousOnlyOperation) for every request."""
    from asgiref.sync import async_to_sync
    from django.conf import settings
    from django.test import AsyncClient

    policy(name="t-acbv", rates="2/m", key="user")
    user = User.objects.create_user("erin")

    async def run() -> list[int]:
        client = AsyncClient(raise_request_exception=False)
        await client.aforce_login(user)
        return [(await client.get("/acbv")).status_code for _ in range(3)]

    alone = [m for m in settings.MIDDLEWARE if "ratelimits" not in m]
    with override_settings(ROOT_URLCONF="tests.cbv_urls", MIDDLEWARE=alone):
        # In this thread, where the test's transaction (and its user) is seen.
        assert async_to_sync(run)() == [200, 200, 429]


def test_raising_rate_limited_answers_429(site_redis: Any) -> None:
    response = Client().get("/raise")
    assert response.status_code == 429
    assert response["Retry-After"] == "7"


def test_async_views_through_the_async_stack(site_redis: Any) -> None:
    import asyncio

    from django.test import AsyncClient

    async def run() -> list[int]:
        client = AsyncClient()
        return [(await client.get("/async")).status_code for _ in range(3)]

    assert asyncio.run(run()) == [200, 200, 429]


def test_redis_down_fails_open_or_closed_and_the_breaker_opens(site_redis: Any) -> None:
    dead = {
        "REDIS": "redis://127.0.0.1:1/0",
        "SOCKET_CONNECT_TIMEOUT": 0.2,
        "BREAKER_FAILURES": 2,
        # An hour: with the default 5 s, a slow run would see the breaker try Redis again.
        "BREAKER_COOLDOWN": 3600,
    }
    policy(name="open", rates="1/m", path=r"^/api/hello")
    failures: list[Any] = []
    backend_failed.connect(lambda **kw: failures.append(kw), weak=False, dispatch_uid="t-down")
    try:
        with override_settings(DJANGO_RATELIMITS=dead):
            assert [Client().get("/api/hello").status_code for _ in range(4)] == [200] * 4
            policy(name="closed", rates="100/m", path=r"^/api/other", fail_closed=True)
            refused = Client().get("/api/other")
            assert refused.status_code == 503
            assert int(refused["Retry-After"]) >= 1
    finally:
        backend_failed.disconnect(dispatch_uid="t-down")
    reasons = [str(f["error"]) for f in failures]
    assert "circuit breaker open" not in reasons[0]
    assert reasons[2:] == ["circuit breaker open"] * 3
    assert [f["fail_closed"] for f in failures] == [False] * 4 + [True]


heard: list[str] = []


async def _heard_denial(sender: Any, **kwargs: Any) -> None:
    heard.append(f"denied by {kwargs['policy'].name}")


async def _heard_failure(sender: Any, **kwargs: Any) -> None:
    heard.append("breaker open" if "breaker" in str(kwargs["error"]) else "redis failed")


@pytest.fixture
def async_receivers() -> Iterator[list[str]]:
    """``async def`` receivers of ``rate_limited`` and ``backend_failed`` (Django 5+)."""
    heard.clear()
    rate_limited.connect(_heard_denial, dispatch_uid="t-async-denial")
    backend_failed.connect(_heard_failure, dispatch_uid="t-async-failure")
    try:
        yield heard
    finally:
        rate_limited.disconnect(dispatch_uid="t-async-denial")
        backend_failed.disconnect(dispatch_uid="t-async-failure")


def _async_statuses(path: str, times: int) -> list[int]:
    import asyncio

    from django.test import AsyncClient

    async def run() -> list[int]:
        client = AsyncClient(raise_request_exception=False)
        return [(await client.get(path)).status_code for _ in range(times)]

    return asyncio.run(run())


def test_async_receivers_hear_denials_on_both_stacks(
    site_redis: Any, async_receivers: list[str]
) -> None:
    """The async stack sends the signals with ``asend``: with ``send``, on the event
    loop, an async receiver raised (``async_to_sync`` in the loop's thread) and every
    denial became a 500."""
    policy(name="api", rates="1/m", path=r"^/api/hello")
    policy(name="other", rates="1/m", path=r"^/api/other")
    client = Client(raise_request_exception=False)
    assert [client.get("/api/hello").status_code for _ in range(2)] == [200, 429]
    assert _async_statuses("/api/other", 2) == [200, 429]
    assert async_receivers == ["denied by api", "denied by other"]


def test_async_receivers_hear_redis_failures_on_both_stacks(
    site_redis: Any, async_receivers: list[str]
) -> None:
    """A Redis failure never becomes a 500, with an async receiver of ``backend_failed``
    too: neither a failed call nor a refusal of the open breaker (made when the request's
    checks are planned, before the call)."""
    from django_ratelimits.breaker import breaker

    policy(name="open", rates="1/m", path=r"^/api/hello")
    dead = {
        "REDIS": "redis://127.0.0.1:1/0",
        "SOCKET_CONNECT_TIMEOUT": 0.2,
        "BREAKER_FAILURES": 1,
        "BREAKER_COOLDOWN": 3600,  # the second request finds the breaker open
    }
    with override_settings(DJANGO_RATELIMITS=dead):
        client = Client(raise_request_exception=False)
        assert [client.get("/api/hello").status_code for _ in range(2)] == [200, 200]
        breaker.success()
        assert _async_statuses("/api/hello", 2) == [200, 200]
    assert async_receivers == ["redis failed", "breaker open"] * 2


def test_a_trial_that_ends_in_an_exception_is_made_by_the_next_request(site_redis: Any) -> None:
    """Half-open, the breaker gives one request the trial. A request that took it and
    ended in an exception of its own (a cancelled task, code around the call) used to
    keep the breaker open for another cooldown without asking Redis: limits failed open
    that much longer. The trial is due again, and the next request makes it."""
    import time

    from django_ratelimits.breaker import breaker
    from django_ratelimits.decide import Planned

    row = policy(name="trial", rates="2/m", path=r"^/api/hello")
    with override_settings(DJANGO_RATELIMITS=_config(BREAKER_COOLDOWN=3600)):
        breaker._opened_at = time.monotonic() - 3601  # open, its cooldown over
        request = RequestFactory().get("/api/hello")

        def cancelled(checks: object) -> Any:
            raise KeyboardInterrupt  # what a BaseException out of the call looks like

        with pytest.raises(KeyboardInterrupt):
            Planned(request, (row.to_spec(),)).run(cancelled)
        assert breaker.is_open
        statuses = [Client().get("/api/hello").status_code for _ in range(3)]
    assert not breaker.is_open  # the next request made the trial, and Redis answered
    assert statuses == [200, 200, 429]


def _config(**extra: object) -> dict[str, object]:
    return {"REDIS": _redis_setting(), **extra}


def test_response_view_renders_the_body_and_headers_are_kept(site_redis: Any) -> None:
    policy(name="api", rates="1/m", path=r"^/api/")
    with override_settings(DJANGO_RATELIMITS=_config(RESPONSE_VIEW="tests.urls.custom_429")):
        client = Client()
        client.get("/api/hello")
        denied = client.get("/api/hello")
    assert denied.status_code == 429
    assert denied.content == b"slow down, friend"
    assert int(denied["Retry-After"]) >= 1
    assert denied["RateLimit"].startswith('"api";r=0;')


def page_429(request: HttpRequest, exception: Exception) -> HttpResponse:
    """A project's 429 page that leaves the status out, as ``render()`` does."""
    return HttpResponse("slow down")


def page_420(request: HttpRequest, exception: Exception) -> HttpResponse:
    return HttpResponse("enhance your calm", status=420)


@pytest.mark.parametrize(("view", "status"), [("page_429", 429), ("page_420", 420)])
def test_a_response_view_that_sets_no_status_still_answers_429(
    site_redis: Any, view: str, status: int
) -> None:
    """docs/request-path.md: the status is filled in if the view leaves it out (a
    refusal is never a 200); a status the view chose is kept."""
    policy(name="api", rates="1/m", path=r"^/api/")
    with override_settings(DJANGO_RATELIMITS=_config(RESPONSE_VIEW=f"{__name__}.{view}")):
        client = Client()
        client.get("/api/hello")
        denied = client.get("/api/hello")
    assert denied.status_code == status
    assert denied.content.startswith(b"slow down" if status == 429 else b"enhance")
    assert int(denied["Retry-After"]) >= 1


def broken_429(request: HttpRequest, exception: Exception) -> HttpResponse:
    raise RuntimeError("the project's 429 page is broken")


@pytest.mark.parametrize(
    ("view", "logged"),
    [
        ("tests.urls.custom_492", "cannot be imported"),  # a typo: named nothing, was a 500
        (f"{__name__}.broken_429", "raised"),
    ],
)
def test_a_response_view_that_fails_gives_the_built_in_429_not_a_500(
    site_redis: Any,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    view: str,
    logged: str,
) -> None:
    monkeypatch.setattr(responses, "_unimportable", set())  # no earlier test's log counts
    policy(name="api", rates="1/m", path=r"^/api/")
    with override_settings(DJANGO_RATELIMITS=_config(RESPONSE_VIEW=view)):
        client = Client(raise_request_exception=False)
        statuses = [
            client.get("/api/hello", headers={"Accept": "application/json"}) for _ in range(3)
        ]
    assert [r.status_code for r in statuses] == [200, 429, 429]
    denied = statuses[-1]
    assert denied["Content-Type"] == "application/problem+json"
    assert int(denied["Retry-After"]) >= 1 and denied["RateLimit"].startswith('"api";r=0;')
    lines = [r for r in caplog.records if r.name == "django_ratelimits" and view in r.getMessage()]
    assert lines and all(
        "RESPONSE_VIEW" in r.getMessage() and logged in r.getMessage() for r in lines
    )
    assert lines[0].exc_info is not None  # the traceback says what is wrong
    # An import that fails is logged once per process, not once per refusal.
    assert len(lines) == (1 if logged == "cannot be imported" else 2)


def test_headers_on_allowed_responses_can_be_turned_off(site_redis: Any) -> None:
    policy(name="api", rates="2/m", path=r"^/api/")
    with override_settings(DJANGO_RATELIMITS=_config(HEADERS_ON_ALLOWED=False)):
        client = Client()
        allowed = client.get("/api/hello")
        client.get("/api/hello")
        denied = client.get("/api/hello")
    assert "RateLimit" not in allowed and "RateLimit-Policy" not in allowed
    assert denied.status_code == 429 and "RateLimit" in denied


def test_the_master_switch_turns_checks_off_without_touching_redis(site_redis: Any) -> None:
    policy(name="api", rates="1/m", path=r"^/api/")
    with override_settings(DJANGO_RATELIMITS=_config(ENABLED=False)):
        assert [Client().get("/api/hello").status_code for _ in range(3)] == [200] * 3
    assert all_keys(site_redis) == []


def hits_of_ip(address: str = "127.0.0.1") -> tuple[Hit, ...]:
    return OffenderReader(get_engine()).detail(Identity("ip", address)).hits


def test_by_default_each_denial_records_who_was_behind_the_ip(site_redis: Any) -> None:
    policy(name="api", rates="1/m", path=r"^/api/")  # "record who" left as it comes
    user = User.objects.create_user("mallory", password="pw")
    client = Client()
    client.force_login(user)
    assert [client.get("/api/hello").status_code for _ in range(3)] == [200, 429, 429]
    hits = hits_of_ip()
    assert [(h.who, h.what, h.outcome) for h in hits] == [
        (f"user:{user.pk}", "GET /api/hello", "D"),
    ] * 2  # the allowed request costs no entry


@pytest.mark.django_db(transaction=True)
def test_who_was_behind_the_ip_is_recorded_through_the_async_stack(site_redis: Any) -> None:
    # Naming the user behind an address reads the session's user from the database:
    # under ASGI that must happen off the event loop, or the request fails instead.
    import asyncio

    from django.test import AsyncClient

    policy(name="api", rates="1/m", path=r"^/api/")
    user = User.objects.create_user("mallory", password="pw")

    async def run() -> list[int]:
        client = AsyncClient()
        await client.aforce_login(user)
        return [(await client.get("/api/hello")).status_code for _ in range(2)]

    assert asyncio.run(run()) == [200, 429]
    assert [h.who for h in hits_of_ip()] == [f"user:{user.pk}"]


def test_a_request_counted_by_an_enforced_and_a_shadow_policy_is_one_hit(site_redis: Any) -> None:
    policy(name="api", rates="5/m", path=r"^/api/", record_metadata="every")
    policy(name="watch", rates="1/m", path=r"^/api/", mode="shadow")
    assert [Client().get("/api/hello").status_code for _ in range(3)] == [200] * 3
    hits = hits_of_ip()
    assert [(h.outcome, dict(h.policies)) for h in hits] == [
        ("S", {"api": "A", "watch": "S"}),
        ("S", {"api": "A", "watch": "S"}),
        ("A", {"api": "A", "watch": "A"}),
    ]
    offenders = OffenderReader(get_engine())
    assert offenders.page().offenders == ()  # nothing was refused: no offender
    assert [o.value for o in offenders.page(shadow=True).offenders] == ["127.0.0.1"]


def test_the_decorator_takes_every_policy_field_as_a_code_default(site_redis: Any) -> None:
    ratelimit(
        "every-field",
        rate="3/m",
        mode="shadow",
        record_metadata="every",
        fail_closed=True,
        exempt_staff=True,
        exempt_superusers=True,
        allow_cidrs=["10.0.0.0/8"],
        methods=["post"],
        path="^/every/",
        priority=4,
        description="all of it",
    )(lambda request: HttpResponse())
    spec = get_registry().get("every-field")
    assert spec is not None
    assert (spec.shadow, spec.record_metadata, spec.fail_closed, spec.path, spec.priority) == (
        True,
        Recording.EVERY,
        True,
        "^/every/",
        4,
    )
    assert spec.exempt_staff and spec.exempt_superusers and spec.methods == {"POST"}
    assert [str(n) for n in spec.allow_cidrs] == ["10.0.0.0/8"] and spec.description == "all of it"
