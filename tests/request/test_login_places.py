"""Failed logins in flight (places) with several policies, gates and bans, on real Redis.

Each login is driven as Django drives it, step by step: the backend's look
(FailedLoginBackend.authenticate, which takes the place), then either Django's
``user_login_failed`` signal (a failure) or the middleware's release at the end of the
response (``inflight.release(request.ratelimit)``: a success). Holding a login between
its look and its end is what a slow password hash does; no thread, no sleep.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.signals import user_login_failed
from django.test import RequestFactory, override_settings

from django_ratelimits.decide import RateLimited
from django_ratelimits.deny_cache import cache_for
from django_ratelimits.engine import Identity, get_engine
from django_ratelimits.inflight import release
from django_ratelimits.logins import BACKEND, FailedLoginBackend
from django_ratelimits.models import Policy
from django_ratelimits.offenders import Offenders
from django_ratelimits.policies import get_registry
from django_ratelimits.testing import FakeClock
from tests.engine_helpers import all_keys

pytestmark = pytest.mark.django_db

LOGIN = "/accounts/login/"
ATTACKER = "198.51.100.7"


@pytest.fixture
def site(site_redis: Any) -> Iterator[Any]:
    backends = [BACKEND, "django.contrib.auth.backends.ModelBackend"]
    with override_settings(ROOT_URLCONF="tests.login_urls", AUTHENTICATION_BACKENDS=backends):
        yield site_redis


def policy(**fields: Any) -> Policy:
    fields = {"rates": "3/15m", "counts": "failed_logins", **fields}
    row = Policy(**fields)
    row.full_clean()
    row.save()
    get_registry().refresh()
    return row


def banning(**fields: Any) -> Policy:
    """A failed-login policy that bans for an hour at its first denial."""
    return policy(ban_after=1, ban_within="1h", ban_for="1h", ban_max="1d", **fields)


def look(username: str, ip: str = ATTACKER, path: str = LOGIN) -> Any:
    """A login's look before its password: its request (holding its places), or
    RateLimited raised."""
    request = RequestFactory().post(path, REMOTE_ADDR=ip)
    FailedLoginBackend().authenticate(request, username=username, password="guess")
    return request


def fail(request: Any, username: str) -> None:
    """The password was wrong: what django.contrib.auth.authenticate() sends."""
    user_login_failed.send(
        sender=__name__,
        credentials={"username": username, "password": "********"},
        request=request,
    )


def end(request: Any) -> None:
    """The response ended (a success): what the middleware's release does."""
    release(getattr(request, "ratelimit", None))


def test_a_failure_is_charged_to_every_policy_though_others_hold_the_address(site: Any) -> None:
    """Two policies, as docs/logins.md recommends combining them: the address (loose) and
    the username with an identity budget (tight). Past its budget an address's failures
    count against the address under the username policy (its gate's fallback group),
    beside the address policy's group: two groups on one in-flight key. Each failure is
    counted under both, though the attacker keeps logins to accounts within his budget
    (his own, which succeed) in flight while each guess fails: a failure's charge counts
    no attempt in flight (it once did in the second group, refused the charge, and the
    guesses went uncounted: 8 of 8)."""
    policy(name="a-address", key="ip", rates="100/h")  # loose, as docs/logins.md says
    policy(name="b-username", key="username", rates="3/15m", identity_budget="2/h")
    # Two usernames of the attacker's within the address's budget (one failure each):
    # the budget is full, so any other username from the address counts against it.
    for own in ("own1", "own2"):
        fail(look(own), own)
    tested = 0
    for _ in range(8):
        try:
            guess = look("victim")
        except RateLimited:
            break
        tested += 1
        # His own logins in flight meanwhile (within budget: gated to their usernames).
        mine = [look("own1"), look("own1"), look("own2")]
        fail(guess, "victim")
        for request in mine:
            end(request)  # they succeeded
    # b-username allows the address 3 guesses at usernames past its budget per 15 min.
    assert tested == 3


def test_logins_that_never_fail_do_not_ban_their_address(site: Any) -> None:
    """Four people behind one address log in at once, all with the right password: the
    fourth is told to retry in a second (three are in flight). No password failed: that
    refusal is no denial and no step towards the policy's ban (it once banned the
    address for an hour)."""
    banning(name="logins", key="ip", rates="3/15m")
    people = [look(name) for name in ("ann", "ben", "cat")]
    with pytest.raises(RateLimited) as refused:
        look("dan")
    assert refused.value.verdict is not None and refused.value.verdict.retry_after() == 1
    for request in people:
        end(request)  # all three signed in
    # Dan retries a second later, as told: nobody has failed a password.
    override = Offenders().inspect(Identity("ip", ATTACKER)).detail.override
    assert override is None, override
    look("dan")


def test_a_failure_the_budget_gate_moves_to_the_address_gives_back_the_username_place(
    site: Any,
) -> None:
    """A username's gate (its address's identity budget) lets the look through, then,
    as another username of that address fails meanwhile and fills the budget, refuses
    at the charge: the failure counts against the address (its fallback), and the place
    the look took in the username's logins in flight is given back all the same (it
    was once left to its lease)."""
    policy(name="b-username", key="username", rates="3/15m", identity_budget="1/h")
    guess = look("victim")
    other = look("someone")
    fail(other, "someone")  # fills the address's budget
    fail(guess, "victim")  # counted against the address
    end(guess)
    end(other)
    places = {k: site.zcard(k) for k in all_keys(site) if b":v:" in k}
    assert all(n == 0 for n in places.values()), places


def test_a_policy_that_refused_only_for_logins_in_flight_does_not_ban(site: Any) -> None:
    """'web' (2/15m, the web login form only) and 'all' (5/h, every login, banning at
    its first denial). Two guesses at the form fail: 'web' is full, 'all' holds 3 more.
    Three people sign in through the API at once (in flight, within 'all'). A third
    guess at the form is refused by 'web' on its own, and by 'all' only for the three in
    flight, which then succeed: 'all' never denied a failure, so it bans no one (the
    group's denial once counted towards every policy that refused it)."""
    web, api = "/accounts/login/", "/api/login/"
    policy(name="web", key="ip", rates="2/15m", path=f"^{web}$")
    banning(name="all", key="ip", rates="5/h")
    for name in ("x1", "x2"):
        fail(look(name, path=web), name)
    people = [look(name, path=api) for name in ("ann", "ben", "cat")]
    with pytest.raises(RateLimited) as refused:
        look("x3", path=web)
    assert refused.value.verdict is not None and refused.value.verdict.decision is not None
    by = {r.limit.policy: (r.allowed, r.held_back) for r in refused.value.verdict.decision.results}
    assert by == {"web": (False, False), "all": (False, True)}
    for request in people:
        end(request)  # all three signed in
    override = Offenders().inspect(Identity("ip", ATTACKER)).detail.override
    assert override is None, override


def _denials() -> int:
    """The address's denials on record, the worker's batch of cached refusals recorded."""
    cache = cache_for(get_engine())
    if cache is not None:
        cache.flush()
    offender = Offenders().inspect(Identity("ip", ATTACKER)).detail.offender
    return 0 if offender is None else offender.denials


def test_logins_held_back_by_those_in_flight_add_no_denial_to_the_record(
    site: Any, frozen_clock: FakeClock
) -> None:
    """An address with a record (three failures and one refusal, 20 minutes ago). Now,
    its window long free, three people behind it log in at once with the right password,
    and four more try meanwhile: each is told to retry in a second, and nobody failed a
    password: the record counts no new denial (the worker's cache of denials once learnt
    the first refusal and counted the next three)."""
    policy(name="logins", key="ip", rates="3/15m")
    for name in ("x1", "x2", "x3"):
        fail(look(name), name)
    with pytest.raises(RateLimited):
        look("x4")
    before = _denials()
    assert before == 1
    frozen_clock.advance(20 * 60)
    people = [look(name) for name in ("ann", "ben", "cat")]
    for name in ("dan", "eve", "fay", "gus"):
        with pytest.raises(RateLimited):
            look(name)  # held back by the three in flight
    for request in people:
        end(request)
    assert _denials() == before


def test_a_request_that_logs_in_twice_counts_both_failures_and_keeps_no_place(
    site: Any,
) -> None:
    """A view that tries a second credential after the first fails (a username, then an
    email) calls authenticate() twice in one request: both looks hold the request's one
    place, both failures are charged, and once the response ends the address holds
    nothing in flight, so its limit counts exactly the two failures."""
    policy(name="logins", key="ip", rates="3/15m")
    request = look("alice")
    fail(request, "alice")
    FailedLoginBackend().authenticate(request, username="alice@example.com", password="guess")
    fail(request, "alice@example.com")
    end(request)
    assert not [key for key in all_keys(site) if b":v:" in key]
    fail(look("carol"), "carol")  # the third failure of the 3/15m
    with pytest.raises(RateLimited):
        look("dave")
