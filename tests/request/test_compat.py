"""django_ratelimits.compat against django-ratelimit 4.x's documented behaviour, on real Redis."""

from __future__ import annotations

import asyncio
import io
import itertools
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import ImproperlyConfigured, PermissionDenied
from django.core.management import call_command
from django.http import HttpRequest, HttpResponse
from django.test import Client, RequestFactory, override_settings

from django_ratelimits import compat
from django_ratelimits.compat import (
    ALL,
    UNSAFE,
    Ratelimited,
    get_usage,
    is_ratelimited,
    ratelimit,
)
from django_ratelimits.engine import Engine
from django_ratelimits.signals import rate_limited
from django_ratelimits.testing import FakeClock, fake_clock
from tests.engine_helpers import EPOCH_US, check_calls

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _frozen(request: pytest.FixtureRequest) -> None:
    """The site's tests on the frozen clock: the compatibility layer's windows are fixed,
    aligned to the epoch as django-ratelimit's, and on Redis' clock an hour could turn
    between the requests of a test that counts to its limit."""
    if "site_redis" in request.fixturenames:
        request.getfixturevalue("frozen_clock")


factory = RequestFactory()
_groups = itertools.count()
DEAD = {"REDIS": "redis://127.0.0.1:1/0", "SOCKET_CONNECT_TIMEOUT": 0.2}


def view_with(**options: Any) -> Callable[[HttpRequest], bool]:
    """A view that counts with ``options`` (its own group unless given) and says if limited."""
    options.setdefault("group", f"t{next(_groups)}")

    @ratelimit(block=False, **options)
    def view(request: HttpRequest) -> bool:
        return request.limited  # type: ignore[attr-defined,no-any-return]

    return view


def as_user(request: HttpRequest, user: Any) -> HttpRequest:
    request.user = user
    return request


def tenant_key(group: str, request: HttpRequest) -> str:
    return request.GET.get("tenant", "")


def rate_for(group: str, request: HttpRequest) -> str | None:
    return None if request.GET.get("vip") else "1/h"


@ratelimit(key="ip", rate="2/h")
def counted(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


# --------------------------------------------------------------------------- keys


def test_ip_key_counts_each_address_exactly(site_redis: Any) -> None:
    view = view_with(key="ip", rate="3/h")
    first = [view(factory.get("/", REMOTE_ADDR="203.0.113.1")) for _ in range(5)]
    assert first == [False, False, False, True, True]
    assert view(factory.get("/", REMOTE_ADDR="203.0.113.2")) is False


def test_user_key_counts_per_user_and_anonymous_users_share_one_count(site_redis: Any) -> None:
    view = view_with(key="user", rate="2/h")
    alice, bob = User.objects.create_user("alice"), User.objects.create_user("bob")
    assert [view(as_user(factory.get("/"), alice)) for _ in range(3)] == [False, False, True]
    assert view(as_user(factory.get("/"), bob)) is False
    anonymous = [
        view(as_user(factory.get("/", REMOTE_ADDR=f"198.51.100.{n}"), AnonymousUser()))
        for n in range(3)
    ]
    assert anonymous == [False, False, True]


def test_user_or_ip_key(site_redis: Any) -> None:
    view = view_with(key="user_or_ip", rate="1/h")
    alice = User.objects.create_user("alice")
    assert view(as_user(factory.get("/", REMOTE_ADDR="203.0.113.1"), alice)) is False
    assert view(as_user(factory.get("/", REMOTE_ADDR="203.0.113.2"), alice)) is True
    # Anonymous: counted by address, apart from the user.
    assert view(as_user(factory.get("/", REMOTE_ADDR="203.0.113.1"), AnonymousUser())) is False
    assert view(as_user(factory.get("/", REMOTE_ADDR="203.0.113.1"), AnonymousUser())) is True
    assert view(as_user(factory.get("/", REMOTE_ADDR="203.0.113.3"), AnonymousUser())) is False


def test_header_key_reads_the_meta_entry_and_a_missing_header_is_one_count(
    site_redis: Any,
) -> None:
    view = view_with(key="header:x-api-key", rate="2/h")
    keyed = [view(factory.get("/", HTTP_X_API_KEY="k1")) for _ in range(3)]
    assert keyed == [False, False, True]
    assert view(factory.get("/", headers={"X-Api-Key": "k2"})) is False
    assert [view(factory.get("/", REMOTE_ADDR=f"198.51.100.{n}")) for n in range(3)] == [
        False,
        False,
        True,
    ]


def test_get_and_post_keys(site_redis: Any) -> None:
    by_query = view_with(key="get:q", rate="1/h")
    assert [by_query(factory.get("/?q=a")) for _ in range(2)] == [False, True]
    assert by_query(factory.get("/?q=b")) is False
    by_form = view_with(key="post:username", rate="1/h")
    assert by_form(factory.post("/", {"username": "ann"})) is False
    assert by_form(factory.post("/", {"username": "ann"})) is True
    assert by_form(factory.post("/", {"username": "bea"})) is False


@pytest.mark.parametrize(
    ("key", "named", "request_of"),
    [
        ("get:q", "get:abuser", lambda: factory.get("/?q=abuser")),
        ("post:username", "post:abuser", lambda: factory.post("/", {"username": "abuser"})),
        ("ip", "ip:203.0.113.66", lambda: factory.get("/", REMOTE_ADDR="203.0.113.66")),
    ],
)
def test_staff_reset_block_and_lift_what_the_compat_layer_counts(
    site_redis: Any, key: str, named: str, request_of: Callable[[], HttpRequest]
) -> None:
    # The offender page lists get: and post: identities and the compat layer's
    # policies: staff must be able to act on what it lists, with the command as on the
    # dashboard (both resolve the same way, and reset every policy the same way).
    view = view_with(key=key, rate="2/h")
    assert [view(request_of()) for _ in range(3)] == [False, False, True]
    call_command("ratelimits", "reset", named, stdout=io.StringIO())
    assert [view(request_of()) for _ in range(3)] == [False, False, True]  # afresh
    call_command("ratelimits", "reset", named, stdout=io.StringIO())
    call_command("ratelimits", "block", named, "--for", "5m", stdout=io.StringIO())
    assert view(request_of()) is True
    call_command("ratelimits", "lift", named, stdout=io.StringIO())
    assert view(request_of()) is False


def test_callable_and_dotted_path_keys_get_the_group_and_request(site_redis: Any) -> None:
    seen: list[str] = []

    def key(group: str, request: HttpRequest) -> str:
        seen.append(group)
        return request.GET["tenant"]

    view = view_with(group="tenants", key=key, rate="1/h")
    assert [view(factory.get("/?tenant=a")) for _ in range(2)] == [False, True]
    assert view(factory.get("/?tenant=b")) is False
    assert seen == ["tenants"] * 3
    dotted = view_with(key="tests.request.test_compat.tenant_key", rate="1/h")
    assert [dotted(factory.get("/?tenant=a")) for _ in range(2)] == [False, True]


def rotating_tenant(group: str, request: HttpRequest) -> str:
    return request.GET["tenant"]


@pytest.mark.parametrize(
    ("key", "request_for"),
    [
        ("header:x-api-key", lambda i: factory.get("/", HTTP_X_API_KEY=f"k{i}")),
        ("get:q", lambda i: factory.get(f"/?q={i}")),
        ("post:username", lambda i: factory.post("/", {"username": f"u{i}"})),
        ("tests.request.test_compat.rotating_tenant", lambda i: factory.get(f"/?tenant={i}")),
    ],
)
def test_a_value_the_client_chooses_passes_the_addresss_identity_budget(
    site_redis: Any,
    monkeypatch: pytest.MonkeyPatch,
    key: str,
    request_for: Callable[[int], HttpRequest],
) -> None:
    """Rotating a key the client chooses escapes nothing: past IDENTITY_BUDGET (50 new
    values an hour per address, the default) a new value counts against the address."""
    clock = FakeClock(EPOCH_US)  # a window cannot end between the requests
    monkeypatch.setattr(compat, "get_engine", lambda: Engine(site_redis, clock=clock))
    view = view_with(key=key, rate="2/h")
    let_through = [view(request_for(i)) for i in range(200)].count(False)
    # 50 values pass the budget, 1 request each; the other 150 share the address's 2.
    assert let_through == 52


def test_forgetting_an_address_erases_its_budgets_of_query_and_form_keys(
    site_redis: Any,
) -> None:
    by_query = view_with(key="get:q", rate="5/h")
    by_form = view_with(key="post:username", rate="5/h")
    by_query(factory.get("/?q=a", REMOTE_ADDR="198.51.100.7"))
    by_form(factory.post("/", {"username": "ann"}, REMOTE_ADDR="198.51.100.7"))

    def budgets() -> list[bytes]:
        return [k for k in site_redis.scan_iter(match="*:g:*") if b"198.51.100.7" in k]

    assert len(budgets()) == 2
    call_command("ratelimits", "forget", "ip:198.51.100.7", stdout=io.StringIO())
    assert budgets() == []


def test_hostile_key_values_never_reach_redis_raw(site_redis: Any) -> None:
    view = view_with(group="my group {x}", key="header:x-api-key", rate="1/h")
    assert view(factory.get("/", HTTP_X_API_KEY="a b\n{c}" * 500)) is False
    keys = [k.decode() for k in site_redis.scan_iter(match="*")]
    assert (
        keys
        and not any(char in key for key in keys for char in " \n")
        and max(map(len, keys)) < 200
    )


# --------------------------------------------------------------------------- methods


def test_only_the_given_methods_are_counted_or_limited(site_redis: Any) -> None:
    view = view_with(key="ip", rate="2/h", method="POST")
    assert [view(factory.get("/")) for _ in range(4)] == [False] * 4
    assert [view(factory.post("/")) for _ in range(3)] == [False, False, True]
    assert view(factory.get("/")) is False
    unsafe = view_with(key="ip", rate="2/h", method=UNSAFE)
    assert [unsafe(factory.get("/")), unsafe(factory.head("/"))] == [False, False]
    assert [unsafe(factory.put("/")), unsafe(factory.delete("/")), unsafe(factory.patch("/"))] == [
        False,
        False,
        True,
    ]
    listed = view_with(key="ip", rate="1/h", method=["get", "head"])
    assert [listed(factory.get("/")), listed(factory.head("/")), listed(factory.post("/"))] == [
        False,
        True,
        False,
    ]
    assert ratelimit.ALL is ALL and ratelimit.UNSAFE is UNSAFE  # type: ignore[attr-defined]


@pytest.mark.parametrize("method", [[None], [None, "POST"], (None,)])
def test_a_method_list_holding_none_counts_every_method(site_redis: Any, method: Any) -> None:
    """``ALL`` is ``(None,)``: a list holding None means the same, where it counted
    nothing, silently (django-ratelimit raises on it)."""
    view = view_with(key="ip", rate="2/h", method=method)
    assert [view(factory.get("/")), view(factory.put("/")), view(factory.post("/"))] == [
        False,
        False,
        True,
    ]


def test_stacked_decorators_on_different_methods_count_apart(site_redis: Any) -> None:
    @ratelimit(key="ip", rate="1/h", method="GET", block=False)
    @ratelimit(key="ip", rate="1/h", method="POST", block=False)
    def view(request: HttpRequest) -> bool:
        return request.limited  # type: ignore[attr-defined,no-any-return]

    assert [view(factory.get("/")), view(factory.post("/"))] == [False, False]
    assert [view(factory.get("/")), view(factory.post("/"))] == [True, True]


# --------------------------------------------------------------------------- blocking


def test_block_raises_ratelimited_a_permission_denied(site_redis: Any) -> None:
    assert issubclass(Ratelimited, PermissionDenied)
    request = factory.get("/", REMOTE_ADDR="203.0.113.9")
    assert counted(request).status_code == 200
    assert counted(request).status_code == 200
    with pytest.raises(Ratelimited) as caught:
        counted(request)
    assert request.limited is True  # type: ignore[attr-defined]
    assert caught.value.verdict is not None and caught.value.verdict.blocked()
    assert str(Ratelimited("custom message")) == "custom message"


def test_limited_stays_true_once_any_decorator_limited(site_redis: Any) -> None:
    @ratelimit(group="loose", key="ip", rate="10/h", block=False)
    @ratelimit(group="tight", key="ip", rate="1/h", block=False)
    def view(request: HttpRequest) -> bool:
        return request.limited  # type: ignore[attr-defined,no-any-return]

    assert view(factory.get("/")) is False
    assert view(factory.get("/")) is True  # "tight" limited, then "loose" allowed


def test_the_middleware_answers_429_and_without_it_django_answers_403(site_redis: Any) -> None:
    with override_settings(ROOT_URLCONF="tests.compat_urls"):
        client = Client()
        responses = [client.get("/compat/ip") for _ in range(3)]
        assert [r.status_code for r in responses] == [200, 200, 429]
        assert 1 <= int(responses[2]["Retry-After"]) <= 3600
        assert responses[2]["RateLimit-Policy"] == '"tests.compat_urls.compat_ip";q=2;w=3600'
        assert client.get("/compat/soft").json() == {"limited": False}
        assert client.get("/compat/soft").json() == {"limited": True}
        from django.conf import settings

        plain = [m for m in settings.MIDDLEWARE if "django_ratelimits" not in m]
        with override_settings(MIDDLEWARE=plain):
            assert Client().get("/compat/ip").status_code == 403


def test_class_based_view_with_method_decorator(site_redis: Any) -> None:
    with override_settings(ROOT_URLCONF="tests.compat_urls"):
        client = Client()
        assert [client.get("/compat/cbv").status_code for _ in range(3)] == [200] * 3
        assert [client.post("/compat/cbv").status_code for _ in range(3)] == [200, 200, 429]
    # The group is the dotted name of the decorated method: the inherited
    # View.dispatch here, shared by every such view (as in django-ratelimit).
    usage = get_usage(
        factory.put("/"),
        group="django.views.generic.base.View.dispatch",
        key="ip",
        rate="2/h",
        method=UNSAFE,
    )
    assert usage is not None and usage["count"] == 2


def test_async_views(site_redis: Any) -> None:
    @ratelimit(key="ip", rate="1/h")
    async def view(request: HttpRequest) -> HttpResponse:
        return HttpResponse("async")

    async def run() -> HttpResponse:
        return await view(factory.get("/"))

    assert asyncio.run(run()).status_code == 200
    with pytest.raises(Ratelimited):
        asyncio.run(run())


# --------------------------------------------------------------------------- functions


def test_is_ratelimited_counts_only_with_increment(site_redis: Any) -> None:
    options: dict[str, Any] = {"group": "fn", "key": "ip", "rate": "2/h"}
    request = factory.get("/")
    assert [is_ratelimited(request, **options) for _ in range(3)] == [False] * 3
    usage = get_usage(request, **options)
    assert usage is not None
    assert (usage["count"], usage["limit"], usage["should_limit"]) == (0, 2, False)
    flags = [is_ratelimited(request, increment=True, **options) for _ in range(3)]
    assert flags == [False, False, True]
    usage = get_usage(request, **options)
    assert usage is not None
    assert (usage["count"], usage["limit"], usage["should_limit"]) == (2, 2, True)
    assert 1 <= usage["time_left"] <= 3600
    assert is_ratelimited(request, **options) is True
    assert not hasattr(request, "limited")  # only the decorator sets it


def test_get_usage_with_increment_reports_the_count_after_this_request(site_redis: Any) -> None:
    options: dict[str, Any] = {"group": "fn", "key": "ip", "rate": "2/h", "increment": True}
    counts = [get_usage(factory.get("/"), **options) for _ in range(3)]
    assert [(u["count"], u["should_limit"]) for u in counts if u] == [
        (1, False),
        (2, False),
        (2, True),  # a refused request is not counted
    ]


def test_the_group_defaults_to_the_views_dotted_name(frozen_clock: FakeClock) -> None:
    # On the test clock: the usages compared hold the seconds left in the hour, which on
    # Redis' clock a second's turn between the two looks made differ.
    request = factory.get("/")
    counted(request)
    usage = get_usage(request, fn=counted, key="ip", rate="2/h")
    assert usage is not None and usage["count"] == 1
    named = get_usage(request, group="tests.request.test_compat.counted", key="ip", rate="2/h")
    assert named == usage
    assert (
        is_ratelimited(
            request, group="tests.request.test_compat.counted", key="ip", rate="2/h", increment=True
        )
        is False
    )
    with pytest.raises(Ratelimited):
        counted(request)


def test_windows_are_fixed_and_aligned_to_the_epoch(
    site_redis: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    hour = 3_600_000_000
    clock = FakeClock(start_us=(480_000 * hour) + 1000 * 1_000_000)
    monkeypatch.setattr(compat, "get_engine", lambda: Engine(site_redis, clock=clock))
    options: dict[str, Any] = {"group": "fw", "key": "ip", "rate": "2/h", "increment": True}
    first = get_usage(factory.get("/"), **options)
    assert first == {"count": 1, "limit": 2, "should_limit": False, "time_left": 2600}
    clock.advance(2599.5)
    last = get_usage(factory.get("/"), **options)
    assert last == {"count": 2, "limit": 2, "should_limit": False, "time_left": 1}
    clock.advance(0.5)
    fresh = get_usage(factory.get("/"), **options)
    assert fresh == {"count": 1, "limit": 2, "should_limit": False, "time_left": 3600}


# --------------------------------------------------------------------------- rates


def test_callable_dotted_tuple_and_none_rates(site_redis: Any) -> None:
    seen: list[str] = []

    def rate(group: str, request: HttpRequest) -> str | None:
        seen.append(group)
        return rate_for(group, request)

    view = view_with(group="rated", key="ip", rate=rate)
    assert [view(factory.get("/")) for _ in range(2)] == [False, True]
    assert [view(factory.get("/?vip=1")) for _ in range(3)] == [False] * 3
    assert seen == ["rated"] * 5
    dotted = view_with(key="ip", rate="tests.request.test_compat.rate_for")
    assert [dotted(factory.get("/")) for _ in range(2)] == [False, True]
    as_tuple = view_with(key="ip", rate=(2, 60))
    assert [as_tuple(factory.get("/")) for _ in range(3)] == [False, False, True]
    unlimited = view_with(key="ip", rate=None)
    assert [unlimited(factory.get("/")) for _ in range(3)] == [False] * 3
    assert get_usage(factory.get("/"), group="x", key="ip", rate=None) is None


def test_rate_multipliers_and_unit_names(site_redis: Any) -> None:
    for rate, period in [("5/10m", 600), ("5/h", 3600), ("5/2d", 172_800), ("5/day", 86_400)]:
        usage = get_usage(factory.get("/"), group=rate, key="ip", rate=rate, increment=True)
        assert usage is not None and 1 <= usage["time_left"] <= period, rate


def test_a_zero_limit_is_always_limited(site_redis: Any) -> None:
    view = view_with(key="ip", rate="0/s")
    assert view(factory.get("/")) is True
    usage = get_usage(factory.get("/"), group="zero", key="ip", rate="0/m")
    assert usage is not None
    assert (usage["count"], usage["limit"], usage["should_limit"]) == (0, 0, True)
    assert 1 <= usage["time_left"] <= 60
    with pytest.raises(Ratelimited) as caught:
        ratelimit(group="zero", key="ip", rate="0/m")(counted)(factory.get("/"))
    assert caught.value.retry_after is not None and 1 <= caught.value.retry_after <= 60


def test_a_zero_limit_s_time_left_follows_the_test_kit_s_clock(site_redis: Any) -> None:
    """Under the kit's clock (docs/testing.md) a 0 limit's window is the clock's, as every
    other limit's: it was the web server's, whatever time the test had set."""
    with fake_clock(start_us=EPOCH_US + 2675 * 1_000_000) as clock:
        usage = get_usage(factory.get("/"), group="zero", key="ip", rate="0/h")
        assert usage is not None and usage["time_left"] == 925
        clock.advance(900)
        with pytest.raises(Ratelimited) as caught:
            ratelimit(group="zero", key="ip", rate="0/h")(counted)(factory.get("/"))
    assert caught.value.retry_after == 25


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"group": "g", "rate": "1/m"}, "key must be specified"),
        ({"group": "g", "rate": "1/m", "key": "cookie:x"}, "Unknown ratelimit key"),
        ({"group": "g", "rate": "1/m", "key": "nope"}, "Could not understand ratelimit key"),
        ({"rate": "1/m", "key": "ip"}, "either `group` or `fn`"),
        ({"group": "g", "rate": "fast", "key": "ip"}, "Could not understand ratelimit rate"),
        ({"group": "g", "rate": "1/0m", "key": "ip"}, "greater than 0"),
        ({"group": "g", "rate": "2000000/s", "key": "ip"}, "between 1 and 1000000"),
        ({"group": "g", "rate": "1/60d", "key": "ip"}, "period"),
    ],
)
def test_configuration_errors(site_redis: Any, options: dict[str, Any], message: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=message):
        get_usage(factory.get("/"), **options)


# --------------------------------------------------------------------------- the rest


def test_a_denial_sends_rate_limited_with_the_group_as_policy(site_redis: Any) -> None:
    seen: list[Any] = []
    rate_limited.connect(lambda **kw: seen.append(kw), weak=False, dispatch_uid="t-compat")
    try:
        view = view_with(group="a group!", key="ip", rate="1/h")
        view(factory.get("/"))
        view(factory.get("/"))
    finally:
        rate_limited.disconnect(dispatch_uid="t-compat")
    assert len(seen) == 1
    name = seen[0]["policy"].name
    assert name.startswith("a-group-~") and " " not in name
    assert seen[0]["shadow"] is False


def test_a_look_sends_no_rate_limited_whoever_answers_it(frozen_clock: FakeClock) -> None:
    # django-ratelimit's pattern: count with increment=True, look with increment=False or
    # get_usage. Only the counted requests Redis refused are signalled: the looks are not,
    # though the cache of denials (which learnt the denials) answers them.
    seen: list[Any] = []
    rate_limited.connect(lambda **kw: seen.append(kw), weak=False, dispatch_uid="t-looks")
    request = factory.get("/", REMOTE_ADDR="203.0.113.9")
    options: dict[str, Any] = {"group": "g", "key": "ip", "rate": "1/h"}
    try:
        charged = [is_ratelimited(request, **options, increment=True) for _ in range(3)]
        assert charged == [False, True, True]
        assert is_ratelimited(request, **options)
        usage = get_usage(request, **options)
        assert usage is not None and usage["should_limit"]
    finally:
        rate_limited.disconnect(dispatch_uid="t-looks")
    assert len(seen) == 2


def test_disabled_limiting_limits_nothing(site_redis: Any) -> None:
    from django.conf import settings

    options: dict[str, Any] = {"group": "off", "key": "ip", "rate": "0/m", "increment": True}
    config = {**settings.DJANGO_RATELIMITS, "ENABLED": False}
    with override_settings(DJANGO_RATELIMITS=config):
        assert get_usage(factory.get("/"), **options) is None
    with override_settings(RATELIMIT_ENABLE=False):
        assert get_usage(factory.get("/"), **options) is None
    assert get_usage(factory.get("/"), **options) is not None


def test_redis_down_fails_open_unless_ratelimit_fail_open_is_false(site_redis: Any) -> None:
    options: dict[str, Any] = {"group": "down", "key": "ip", "rate": "1/h", "increment": True}
    with override_settings(DJANGO_RATELIMITS=DEAD):
        assert get_usage(factory.get("/"), **options) is None
        assert is_ratelimited(factory.get("/"), **options) is False
        with override_settings(RATELIMIT_FAIL_OPEN=False):
            assert get_usage(factory.get("/"), **options) == {
                "count": 0,
                "limit": 0,
                "should_limit": True,
                "time_left": -1,
            }
            with pytest.raises(Ratelimited) as caught:
                counted(factory.get("/"))
            assert caught.value.verdict is not None and caught.value.verdict.error is not None
            with override_settings(ROOT_URLCONF="tests.compat_urls"):
                refused = Client().get("/compat/ip")
            assert refused.status_code == 429 and int(refused["Retry-After"]) >= 1


@pytest.mark.parametrize("redis_client", ["standalone"], indirect=True)
def test_one_decision_is_one_round_trip(site_redis: Any) -> None:
    request = factory.get("/")
    counted(request)
    before = check_calls(site_redis)
    counted(request)
    get_usage(request, fn=counted, key="ip", rate="2/h")
    assert check_calls(site_redis) - before == 2
