"""Escalating bans (lua/ban.lua): after N denials within T, a block of B, doubled
on each repeat up to a cap, decided in the check call itself."""

from __future__ import annotations

from typing import Any

import pytest

from django_ratelimits.engine import Ban, Check, Engine, Identity, Limit
from django_ratelimits.engine.controls import Controls
from django_ratelimits.engine.limits import MAX_BAN_AFTER, MAX_BAN_SECONDS
from django_ratelimits.engine.offenders import OffenderReader
from django_ratelimits.engine.overrides import Note
from django_ratelimits.rates import Rate
from django_ratelimits.testing import FakeClock
from tests.engine_helpers import EPOCH_US, fresh_engine

IP = Identity("ip", "198.51.100.9")
S = 1_000_000
# 1 request per 10 s; 3 denials within 60 s ban for 100 s, doubling up to 350 s.
BAN = Ban(after=3, within=60, duration=100, maximum=350)
ONE_PER_10S = Rate(1, 10)


def checks(ban: Ban | None = BAN, rate: Rate = ONE_PER_10S) -> list[Check]:
    return [Check(IP, [Limit("login", rate, ban=ban)])]


def deny(engine: Engine, n: int, clock: FakeClock, step_us: int = 0) -> None:
    """``n`` requests that the limit denies, ``step_us`` apart."""
    for _ in range(n):
        decision = engine.check(checks())
        assert not decision.allowed and not decision.results[0].blocked
        clock.advance(us=step_us)


def start(redis_client: Any) -> tuple[Engine, FakeClock]:
    clock = FakeClock(EPOCH_US)
    engine = fresh_engine(redis_client, clock)
    assert engine.check(checks()).allowed  # the one request of the window
    return engine, clock


def test_the_nth_denial_within_the_window_bans(redis_client: Any) -> None:
    engine, clock = start(redis_client)
    deny(engine, 2, clock, step_us=S)
    override = Controls(engine).override(IP)
    assert override is None, "N - 1 denials banned"
    deny(engine, 1, clock)
    override = Controls(engine).override(IP)
    assert override is not None and override.state == "blocked"
    assert override.seconds == 100


def test_n_denials_spread_over_more_than_the_window_do_not_ban(redis_client: Any) -> None:
    engine, clock = start(redis_client)
    # 3 denials 30 s apart span 60 s: never 3 within 60 s. The limit allows one request
    # every 10 s, so each denial follows an allowed request.
    for _ in range(3):
        deny(engine, 1, clock)
        clock.advance(us=30 * S)
        assert engine.check(checks()).allowed
    assert Controls(engine).override(IP) is None


def test_while_banned_every_request_is_refused_until_the_ban_ends(redis_client: Any) -> None:
    engine, clock = start(redis_client)
    deny(engine, 3, clock)
    clock.advance(us=50 * S)  # the rate limit would allow again
    decision = engine.check(checks())
    result = decision.results[0]
    assert not decision.allowed and result.blocked
    assert result.retry_after_us == 50 * S, "Retry-After is not the ban's remaining time"
    clock.advance(us=50 * S - 1)
    assert not engine.check(checks()).allowed
    clock.advance(us=1)
    assert engine.check(checks()).allowed, "the ban did not end"


def ban_length(engine: Engine, clock: FakeClock) -> int:
    """Deny until banned; the ban's length (s); then wait it out."""
    deny(engine, 3, clock)
    override = Controls(engine).override(IP)
    assert override is not None
    clock.advance(us=override.seconds * S)
    assert engine.check(checks()).allowed
    return override.seconds


def test_each_repeat_doubles_the_ban_up_to_the_cap(redis_client: Any) -> None:
    engine, clock = start(redis_client)
    assert [ban_length(engine, clock) for _ in range(4)] == [100, 200, 350, 350]


def test_the_level_is_forgotten_after_a_quiet_cap(redis_client: Any) -> None:
    engine, clock = start(redis_client)
    assert [ban_length(engine, clock) for _ in range(2)] == [100, 200]
    clock.advance(us=349 * S)  # 350 s after the ban's end would forget it
    assert engine.check(checks()).allowed
    assert ban_length(engine, clock) == 350, "the level was forgotten too early"
    clock.advance(us=350 * S)
    assert engine.check(checks()).allowed
    assert ban_length(engine, clock) == 100, "the level outlived a quiet cap"


def test_a_ban_is_a_block_the_lists_show_and_a_lift_ends(redis_client: Any) -> None:
    engine, clock = start(redis_client)
    deny(engine, 3, clock)
    controls = Controls(engine)
    (active,) = controls.active().overrides
    assert active.state == "blocked" and active.seconds == 100
    assert active.note is not None and active.note.banned
    assert (active.note.level, active.note.policy) == (1, "login")
    controls.lift(IP)
    assert controls.active().overrides == ()
    assert not engine.check(checks()).results[0].blocked, "the ban outlived its lift"
    clock.advance(us=11 * S)  # the sliding window's last bucket too
    assert engine.check(checks()).allowed


def test_shadow_groups_and_peeks_never_ban(redis_client: Any) -> None:
    clock = FakeClock(EPOCH_US)
    engine = fresh_engine(redis_client, clock)
    shadow = [Check(IP, [Limit("login", Rate(1, 10), ban=BAN)], shadow=True)]
    for _ in range(5):
        engine.check(shadow)
        engine.peek(checks(), cost=1)
    assert Controls(engine).override(IP) is None


def test_a_soft_check_of_a_refused_request_is_no_denial_and_never_bans(
    redis_client: Any,
) -> None:
    """A request another check refuses does not go on, so a soft check (a view's
    block=False policy) beside it is only looked at: on standalone Redis its denials were
    noted and banned its identity, where a cluster's soft round only peeked (found by an
    exactness review)."""
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    user = Identity("user", "7")
    site = Check(IP, [Limit("site", Rate(1, 3600))])
    soft = Check(user, [Limit("soft", Rate(1, 3600), ban=BAN)], soft=True)
    assert engine.check([site, soft]).allowed  # both spent now
    for _ in range(5):
        decision = engine.check([site, soft])
        assert [r.allowed for r in decision.results] == [False, False]
    assert Controls(engine).override(user) is None
    assert OffenderReader(engine).detail(user).offender is None  # no denial of it recorded


def test_a_policy_without_a_ban_never_bans(redis_client: Any) -> None:
    clock = FakeClock(EPOCH_US)
    engine = fresh_engine(redis_client, clock)
    for _ in range(20):
        engine.check(checks(ban=None))
    assert Controls(engine).override(IP) is None


def test_every_key_a_ban_writes_has_a_ttl(redis_client: Any) -> None:
    engine, clock = start(redis_client)
    deny(engine, 3, clock)
    keys = engine.keys.of(IP)
    for key in (keys.state, keys.override_note, keys.override_index):
        assert redis_client.pttl(key) > 0, key
    note = Note.decode(redis_client.get(keys.override_note))
    assert note is not None and note.label == "ip:198.51.100.9"


@pytest.mark.parametrize(
    ("after", "within", "duration", "maximum"),
    [
        (0, 60, 60, 60),
        (MAX_BAN_AFTER + 1, 60, 60, 60),
        (3, 0, 60, 60),
        (3, 60, MAX_BAN_SECONDS + 1, MAX_BAN_SECONDS + 1),
        (3, 60, 10**12 * 86_400, 10**12 * 86_400),
        (3, 60, 120, 60),
    ],
)
def test_a_ban_out_of_bounds_is_refused(
    after: int, within: int, duration: int, maximum: int
) -> None:
    with pytest.raises(ValueError):
        Ban(after, within, duration, maximum)


def test_the_longest_ban_at_the_highest_level_stays_exact(redis_client: Any) -> None:
    """The largest values validation admits, at a level whose doubling overflows any
    integer: the ban is the cap, to the microsecond."""
    clock = FakeClock(EPOCH_US)
    engine = fresh_engine(redis_client, clock)
    top = Ban(1, MAX_BAN_SECONDS, MAX_BAN_SECONDS, MAX_BAN_SECONDS)
    chk = [Check(IP, [Limit("login", Rate(1, 1), ban=top)])]
    for _ in range(70):
        engine.check(chk)
        engine.check(chk)
        decision = engine.check(chk)
        assert decision.results[0].retry_after_us == MAX_BAN_SECONDS * S
        clock.advance(us=MAX_BAN_SECONDS * S)


def test_a_reset_forgets_the_level_and_the_denials(redis_client: Any) -> None:
    engine, clock = start(redis_client)
    assert ban_length(engine, clock) == 100
    deny(engine, 2, clock)
    controls = Controls(engine)
    controls.reset(IP, checks()[0].limits)
    assert engine.check(checks()).allowed  # the limit's counter went too
    deny(engine, 2, clock)
    assert controls.override(IP) is None, "the denials before the reset still counted"
    deny(engine, 1, clock)
    override = controls.override(IP)
    assert override is not None and (override.level, override.seconds) == (1, 100)


def test_a_limit_that_charges_its_own_cost_still_bans(redis_client: Any) -> None:
    # A policy's cost per request frames its limits differently ("<len>*<cost>:"); the
    # ban after the spec must still be read, or a costly policy would never ban.
    clock = FakeClock(EPOCH_US)
    engine = fresh_engine(redis_client, clock)
    costly = [Check(IP, [Limit("login", Rate(10, 10), ban=BAN)], costs=(5,))]
    assert [engine.check(costly).allowed for _ in range(5)] == [True, True, False, False, False]
    override = Controls(engine).override(IP)
    assert override is not None and override.state == "blocked" and override.seconds == 100


def test_only_the_policy_that_denied_counts_towards_its_ban(redis_client: Any) -> None:
    """A group of two policies denied by the one without a ban: the banning policy
    allowed, so its denials are not counted and no ban follows."""
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    group = [Check(IP, [Limit("login", Rate(100, 10), ban=BAN), Limit("strict", ONE_PER_10S)])]
    assert engine.check(group).allowed
    for _ in range(2 * BAN.after):
        decision = engine.check(group)
        assert [r.allowed for r in decision.results] == [True, False]
    assert Controls(engine).override(IP) is None
