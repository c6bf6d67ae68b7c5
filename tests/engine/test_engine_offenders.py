"""The offender index, offender records and metadata lists the dashboard reads."""

from __future__ import annotations

from typing import Any

import pytest

from django_ratelimits.engine import Algorithm, Check, Engine, Identity, KeySpace, Limit, overrides
from django_ratelimits.engine.controls import Controls
from django_ratelimits.engine.hits import ANONYMOUS, Hit, entry_head, ip_behind, user_behind
from django_ratelimits.engine.keys import OVERRIDE, ident
from django_ratelimits.engine.offenders import OffenderReader
from django_ratelimits.rates import parse_rates
from django_ratelimits.testing import FakeClock
from tests.engine_helpers import EPOCH_US, fresh_engine

LOGIN = [Limit("login", rate, Algorithm.SLIDING_WINDOW) for rate in parse_rates("2/m")]
API = [Limit("api", rate, Algorithm.GCRA) for rate in parse_rates("100/m")]
ONE_M = parse_rates("1/m")


def index_of(engine: Engine, identity: Identity) -> str:
    return engine.keys.of(identity).index


def test_denials_are_recorded_per_identity_and_policy(redis_client: Any) -> None:
    clock = FakeClock(EPOCH_US)
    engine = fresh_engine(redis_client, clock)
    ip = Identity("ip", "203.0.113.7")
    for _ in range(12):
        engine.check([Check(ip, LOGIN + API)])
        clock.advance(0.01)
    record = redis_client.hgetall(engine.keys.of(ip).record)
    assert record[b"id"] == b"ip:203.0.113.7"
    assert int(record[b"n"]) == 10
    assert int(record[b"d:login"]) == 10
    assert b"d:api" not in record
    # The time of the last denial is kept to the second: all ten fell in one.
    assert int(record[b"first"]) == int(record[b"last"]) == EPOCH_US // 1000 + 20
    clock.advance(1)
    engine.check([Check(ip, LOGIN + API)])
    record = redis_client.hgetall(engine.keys.of(ip).record)
    assert int(record[b"last"]) == EPOCH_US // 1000 + 1120
    assert int(record[b"n"]) == 11


def test_the_index_is_written_at_most_once_a_second_per_identity(redis_client: Any) -> None:
    clock = FakeClock(EPOCH_US)
    engine = fresh_engine(redis_client, clock)
    ip = Identity("ip", "203.0.113.8")
    index = index_of(engine, ip)
    engine.check([Check(ip, LOGIN)])
    engine.check([Check(ip, LOGIN)])
    first = EPOCH_US // 1000
    for _ in range(50):  # 50 denials within 0.5 s
        engine.check([Check(ip, LOGIN)])
        clock.advance(0.01)
    assert redis_client.zscore(index, ident(ip)) == first
    clock.advance(0.5)
    engine.check([Check(ip, LOGIN)])
    assert redis_client.zscore(index, ident(ip)) == first + 1000


def test_the_index_is_capped_and_keeps_the_latest(redis_client: Any) -> None:
    clock = FakeClock(EPOCH_US)
    engine = Engine(
        redis_client, keys=KeySpace(prefix="capped", shards=1), clock=clock, offender_index_max=3
    )
    ips = [Identity("ip", f"192.0.2.{n}") for n in range(6)]
    for ip in ips:
        for _ in range(3):
            engine.check([Check(ip, LOGIN)])
        clock.advance(1)
    members = redis_client.zrange(engine.keys.index(0), 0, -1)
    assert members == [ident(ip).encode() for ip in ips[3:]]
    # The records of the identities the cap dropped go with them; the others stay.
    records = [redis_client.exists(engine.keys.of(ip).record) for ip in ips]
    assert records == [0, 0, 0, 1, 1, 1]


def test_the_index_forgets_entries_past_retention(redis_client: Any) -> None:
    clock = FakeClock(EPOCH_US)
    engine = Engine(
        redis_client, keys=KeySpace(prefix="retain", shards=1), clock=clock, offender_retention=60
    )
    old, new = Identity("ip", "192.0.2.1"), Identity("ip", "192.0.2.2")
    for _ in range(3):
        engine.check([Check(old, LOGIN)])
    clock.advance(61)
    for _ in range(3):
        engine.check([Check(new, LOGIN)])
    assert redis_client.zrange(engine.keys.index(0), 0, -1) == [ident(new).encode()]


def test_metadata_list_tells_who_was_behind_an_ip_and_is_capped(redis_client: Any) -> None:
    clock = FakeClock(EPOCH_US)
    engine = fresh_engine(redis_client, clock, metadata_max_entries=5)
    ip = Identity("ip", "203.0.113.9")
    for n in range(4):
        engine.check([Check(ip, LOGIN, metadata=f"user:{n % 2}|/login", record_every=True)])
        clock.advance(0.001)
    entries = redis_client.lrange(engine.keys.of(ip).metadata, 0, -1)
    now_ms = EPOCH_US // 1000
    assert entries == [
        f"user:1|/login|{now_ms + 3}|D|login=D".encode(),
        f"user:0|/login|{now_ms + 2}|D|login=D".encode(),
        f"user:1|/login|{now_ms + 1}|A|login=A".encode(),
        f"user:0|/login|{now_ms}|A|login=A".encode(),
    ]
    for n in range(10):
        engine.check([Check(ip, LOGIN, metadata=f"user:{n}|/login", record_every=True)])
    # Trimmed back to the cap once a fifth over it; readers see the newest five.
    assert 5 <= redis_client.llen(engine.keys.of(ip).metadata) <= 6
    hits = OffenderReader(engine).detail(ip).hits
    assert [hit.who for hit in hits] == [f"user:{n}" for n in (9, 8, 7, 6, 5)]


def test_metadata_lives_at_least_its_ttl_after_the_newest_entry(redis_client: Any) -> None:
    engine = fresh_engine(redis_client, metadata_ttl=100)  # Redis' clock: real TTLs
    ip = Identity("ip", "203.0.113.10")
    key = engine.keys.of(ip).metadata
    engine.check([Check(ip, API, metadata="user:1|/api", record_every=True)])
    assert 100_000 < redis_client.pttl(key) <= 125_000
    redis_client.pexpire(key, 110_000)  # more than the TTL left: a push leaves it
    engine.check([Check(ip, API, metadata="user:1|/api", record_every=True)])
    assert 100_000 < redis_client.pttl(key) <= 110_000
    redis_client.pexpire(key, 90_000)  # less: the push renews it
    engine.check([Check(ip, API, metadata="user:1|/api", record_every=True)])
    assert 100_000 < redis_client.pttl(key) <= 125_000


def test_no_metadata_unless_asked(redis_client: Any) -> None:
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    ip = Identity("ip", "203.0.113.10")
    engine.check([Check(ip, API)])
    assert not redis_client.exists(engine.keys.of(ip).metadata)
    assert not redis_client.exists(engine.keys.of(ip).record)


def test_the_count_index_ranks_offenders_by_denials(redis_client: Any) -> None:
    """Written at most once a second per identity: the ranking lags by under a second."""
    clock = FakeClock(EPOCH_US)
    engine = Engine(redis_client, keys=KeySpace(prefix="counted", shards=1), clock=clock)
    for n, ip in enumerate([Identity("ip", f"192.0.2.{n}") for n in range(3)]):
        for _ in range(2 + 3 * n):  # 2 allowed, then n * 3 denials, a second apart
            engine.check([Check(ip, LOGIN)])
            clock.advance(1)
    ranked = redis_client.zrevrange(engine.keys.count_index(0), 0, -1, withscores=True)
    assert ranked == [(b"ip:192.0.2.2", 6.0), (b"ip:192.0.2.1", 3.0)]


def test_trimming_keeps_both_indexes_in_step(redis_client: Any) -> None:
    clock = FakeClock(EPOCH_US)
    engine = Engine(
        redis_client, keys=KeySpace(prefix="step", shards=1), clock=clock, offender_index_max=2
    )
    for n in range(5):
        ip = Identity("ip", f"192.0.2.{n}")
        for _ in range(3):
            engine.check([Check(ip, LOGIN)])
        clock.advance(1)
    by_time = redis_client.zrange(engine.keys.index(0), 0, -1)
    by_count = redis_client.zrange(engine.keys.count_index(0), 0, -1)
    assert sorted(by_time) == sorted(by_count) == [b"ip:192.0.2.3", b"ip:192.0.2.4"]


def test_a_blocked_identity_is_denied_until_the_block_ends(redis_client: Any) -> None:
    clock = FakeClock(EPOCH_US)
    engine = fresh_engine(redis_client, clock)
    ip = Identity("ip", "203.0.113.66")
    Controls(engine).block(ip, 30)
    assert Controls(engine).override(ip) == ("blocked", 30, 0)
    decision = engine.check([Check(ip, API)])
    assert not decision.allowed
    assert decision.retry_after_us == 30_000_000
    record = redis_client.hgetall(engine.keys.of(ip).record)
    assert int(record[b"d:!blocked"]) == 1
    clock.advance(30)
    assert Controls(engine).override(ip) is None
    assert engine.check([Check(ip, API)]).allowed


def test_an_allow_listed_identity_passes_uncounted_and_lift_ends_it(redis_client: Any) -> None:
    clock = FakeClock(EPOCH_US)
    engine = fresh_engine(redis_client, clock)
    ip = Identity("ip", "203.0.113.67")
    Controls(engine).allow(ip, 600)
    assert all(engine.check([Check(ip, LOGIN)]).allowed for _ in range(10))
    Controls(engine).lift(ip)
    assert Controls(engine).override(ip) is None
    assert [engine.check([Check(ip, LOGIN)]).allowed for _ in range(3)] == [True, True, False]


def test_overrides_need_a_sane_duration(redis_client: Any) -> None:
    engine = fresh_engine(redis_client)
    with pytest.raises(ValueError, match="to 365 days"):
        Controls(engine).block(Identity("ip", "203.0.113.68"), 0)
    # Shorter than the keys' TTLs can say (whole ms): Redis refused SET's PX 0 (a
    # BackendError, as if Redis had failed), or on a test clock no override was set.
    for seconds in (1e-7, 0.0004, float("nan"), float("inf"), 366 * 86_400):
        with pytest.raises(ValueError, match="to 365 days"):
            Controls(engine).allow(Identity("ip", "203.0.113.68"), seconds)


# --------------------------------------------------------------------------- wire formats


@pytest.mark.parametrize("mode", [overrides.BLOCKED, overrides.ALLOWED])
def test_the_script_obeys_an_override_marker_as_the_python_side_reads_it(
    redis_client: Any, mode: str
) -> None:
    clock = FakeClock(EPOCH_US)
    engine = fresh_engine(redis_client, clock)
    ip = Identity("ip", "203.0.113.70")
    value = overrides.marker(mode, EPOCH_US + 30_000_000)
    redis_client.hset(engine.keys.of(ip).state, OVERRIDE, value)
    read = overrides.decode(value, EPOCH_US)
    assert read == Controls(engine).override(ip) and read is not None
    outcomes = [engine.check([Check(ip, LOGIN)]).allowed for _ in range(3)]
    record = redis_client.hgetall(engine.keys.of(ip).record)
    if read.state == "blocked":
        assert outcomes == [False] * 3
        assert int(record[f"d:{overrides.BLOCKED_POLICY}".encode()]) == 3
    else:
        assert read.state == "allowed" and outcomes == [True] * 3 and not record


@pytest.mark.parametrize(
    "value",
    ["x:{until}", "b{until}", "b:{until}0x", "a: {until}", "b:1e30", "B:{until}", "blocked"],
)
def test_a_malformed_override_marker_is_no_override_to_the_script_or_the_dashboard(
    redis_client: Any, value: str
) -> None:
    """Whatever sits in an override key, Python and Lua read the same: here, nothing,
    so the limits apply (before, the script skipped reading the counters on such a
    value and admitted every request, while the dashboard showed it allow-listed)."""
    clock = FakeClock(EPOCH_US)
    engine = fresh_engine(redis_client, clock)
    ip = Identity("ip", "203.0.113.71")
    value = value.format(until=EPOCH_US + 30_000_000)
    redis_client.hset(engine.keys.of(ip).state, OVERRIDE, value)
    assert overrides.decode(value, EPOCH_US) is None
    assert OffenderReader(engine).detail(ip).override is None
    assert [engine.check([Check(ip, LOGIN)]).allowed for _ in range(3)] == [True, True, False]


def test_a_hit_entry_the_script_stores_parses_back_to_what_the_limiter_sent(
    redis_client: Any,
) -> None:
    """``|`` may stand in a method, a path and a user's key: none of them can move
    the parts of an entry, and an entry cut to its bound still parses."""
    clock = FakeClock(EPOCH_US)
    engine = fresh_engine(redis_client, clock)
    ip, user = Identity("ip", "203.0.113.72"), Identity("user", "7")
    path = f"/a|{EPOCH_US // 1000}|A"
    every = {"record_every": True}
    engine.check([Check(ip, LOGIN, entry_head(user_behind("7|8"), "GE|T", path), **every)])
    clock.advance(0.001)
    engine.check([Check(ip, LOGIN, entry_head(user_behind(None), "POST", "/login"), **every)])
    clock.advance(0.001)
    head = entry_head(ip_behind("2001:db8::/64"), "GET", "/x" * 400)
    engine.check([Check(user, LOGIN, head, **every)])
    engine.check([Check(ip, LOGIN, entry_head(user_behind(None), "POST", "/login"), **every)])
    now_ms = EPOCH_US // 1000
    assert OffenderReader(engine).detail(ip).hits == (
        Hit(ANONYMOUS, "POST /login", now_ms + 2, "D", (("login", "D"),)),
        Hit(ANONYMOUS, "POST /login", now_ms + 1, "A", (("login", "A"),)),
        Hit("user:7|8", f"GE|T {path}", now_ms, "A", (("login", "A"),)),
    )
    (long,) = OffenderReader(engine).detail(user).hits
    assert long.who == "ip:2001:db8::/64" and long.allowed
    assert long.what.startswith("GET /x/x") and len(long.what) < 300


WATCH = [Limit("watch", rate, Algorithm.FIXED_WINDOW) for rate in parse_rates("1/m")]


def test_a_shadow_check_keeps_would_be_denials_apart_from_denials(redis_client: Any) -> None:
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    ip = Identity("ip", "203.0.113.80")
    for _ in range(3):
        engine.check([Check(ip, WATCH, shadow=True)])
    keys, reader = engine.keys.of(ip), OffenderReader(engine)
    assert not redis_client.exists(keys.record)
    assert reader.page().offenders == ()
    detail = reader.detail(ip)
    assert detail.offender is None
    assert detail.shadow is not None and detail.shadow.denials == 2
    assert detail.shadow.by_policy == {"watch": 2}
    (shadowed,) = reader.page(shadow=True).offenders
    assert shadowed.ident == ident(ip) and shadowed.denials == 2


def test_one_request_counted_by_enforced_and_shadow_policies_is_one_hit(
    redis_client: Any,
) -> None:
    clock = FakeClock(EPOCH_US)
    engine = fresh_engine(redis_client, clock)
    ip = Identity("ip", "203.0.113.81")
    head = entry_head(user_behind(42), "GET", "/api/orders")
    for _ in range(4):
        engine.check([Check(ip, LOGIN, head), Check(ip, WATCH, head, shadow=True)])
        clock.advance(0.001)
    hits = OffenderReader(engine).detail(ip).hits
    # Allowed by both: not recorded by default. Then the shadow policy alone would
    # have denied, then the enforced one denied too (twice): one entry a request.
    assert [(h.outcome, h.policies) for h in hits] == [
        ("D", (("login", "D"), ("watch", "S"))),
        ("D", (("login", "D"), ("watch", "S"))),
        ("S", (("login", "A"), ("watch", "S"))),
    ]
    assert hits[2].shadow and not hits[2].denied and hits[0].denied


def test_every_hit_is_recorded_when_any_check_of_the_identity_asks(redis_client: Any) -> None:
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    ip = Identity("ip", "203.0.113.82")
    head = entry_head(user_behind(None), "GET", "/")
    engine.check([Check(ip, API, head), Check(ip, WATCH, head, shadow=True, record_every=True)])
    (hit,) = OffenderReader(engine).detail(ip).hits
    assert hit.allowed and hit.policies == (("api", "A"), ("watch", "A"))


def test_a_policy_name_cannot_forge_the_outcome_of_another_in_a_hit(redis_client: Any) -> None:
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    ip = Identity("ip", "203.0.113.83")
    forged = [Limit("x=A,api=D|D", rate) for rate in parse_rates("1/m")]
    head = entry_head(user_behind(None), "GET", "/")
    engine.check([Check(ip, forged, head, record_every=True)])
    engine.check([Check(ip, forged, head)])
    denied, allowed = OffenderReader(engine).detail(ip).hits
    assert allowed.allowed and allowed.policies == (("x_A_api_D_D", "A"),)
    assert denied.denied and denied.policies == (("x_A_api_D_D", "D"),)


def test_a_block_denies_shadow_checks_into_the_shadow_ledger_and_is_one_hit(
    redis_client: Any,
) -> None:
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    ip = Identity("ip", "203.0.113.84")
    Controls(engine).block(ip, 60)
    head = entry_head(user_behind(None), "GET", "/")
    decision = engine.check([Check(ip, API, head), Check(ip, WATCH, head, shadow=True)])
    assert [(r.limit.policy, r.allowed, r.blocked) for r in decision.results] == [
        ("api", False, True),
        ("watch", False, True),
    ]
    keys = engine.keys.of(ip)
    assert redis_client.hget(keys.record, "d:!blocked") == b"1"
    assert redis_client.hget(keys.shadow_record, "d:!blocked") == b"1"
    (hit,) = OffenderReader(engine).detail(ip).hits
    assert hit.denied and hit.policies == ((overrides.BLOCKED_POLICY, "D"),)


def test_a_check_without_overrides_is_decided_by_its_limits_in_either_ledger(
    redis_client: Any,
) -> None:
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    ip = Identity("ip", "203.0.113.85")
    Controls(engine).block(ip, 60)
    keys = engine.keys.of(ip)
    head = entry_head(user_behind(None), "GET", "/admin/login/")
    checks = [
        Check(ip, LOGIN, head, overrides=False),
        Check(ip, WATCH, head, shadow=True, overrides=False),
    ]
    first, second = engine.check(checks), engine.check(checks)
    assert [r.allowed for r in first.results] == [True, True]
    assert [(r.allowed, r.blocked) for r in second.results] == [(True, False), (False, False)]
    assert not redis_client.exists(keys.record)
    assert redis_client.hgetall(keys.shadow_record)[b"d:watch"] == b"1"
    (hit,) = OffenderReader(engine).detail(ip).hits
    assert hit.outcome == "S" and hit.policies == (("login", "A"), ("watch", "S"))


def test_one_request_is_one_denial_however_many_groups_name_the_identity(
    redis_client: Any,
) -> None:
    # Two groups of one address in one call (the decider makes them for two gates, or
    # for a gate's fallback beside the address's own policies): one request, one denial.
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    ip = Identity("ip", "203.0.113.86")
    one = [Limit("one", rate, Algorithm.GCRA) for rate in parse_rates("1/m")]
    two = [Limit("two", rate, Algorithm.FIXED_WINDOW) for rate in parse_rates("1/m")]
    head = entry_head(user_behind(None), "GET", "/")
    for _ in range(3):
        engine.check([Check(ip, one, head), Check(ip, two, head)])
    offender = OffenderReader(engine).detail(ip).offender
    assert offender is not None
    assert (offender.denials, offender.by_policy) == (2, {"one": 2, "two": 2})


def test_an_identity_counted_by_one_group_records_its_outcome_by_its_policies(
    redis_client: Any,
) -> None:
    """A request's entry of an identity that one group counts (the common case, made
    without merging groups): a shadow group's would-be denial is 'S', a block names
    itself, and a group of two policies names both, each with its own outcome."""
    clock = FakeClock(EPOCH_US)
    engine = fresh_engine(redis_client, clock)
    watched, blocked, both = (Identity("ip", f"203.0.113.{n}") for n in (90, 91, 92))
    head = entry_head(user_behind(None), "GET", "/")
    for _ in range(2):
        engine.check([Check(watched, WATCH, head, shadow=True)])
        clock.advance(0.001)
    Controls(engine).block(blocked, 60)
    engine.check([Check(blocked, API, head)])
    for _ in range(2):
        engine.check([Check(both, [*WATCH, *API], head, record_every=True)])
        clock.advance(0.001)
    reader = OffenderReader(engine)
    (shadowed,) = reader.detail(watched).hits
    assert shadowed.outcome == "S" and shadowed.policies == (("watch", "S"),)
    (refused,) = reader.detail(blocked).hits
    assert refused.outcome == "D" and refused.policies == ((overrides.BLOCKED_POLICY, "D"),)
    second, first = reader.detail(both).hits
    assert first.outcome == "A" and first.policies == (("watch", "A"), ("api", "A"))
    assert second.outcome == "D" and second.policies == (("watch", "D"), ("api", "A"))


def test_a_policy_whose_later_rate_denies_is_denied_in_the_hit(redis_client: Any) -> None:
    """A policy's outcome in an entry is the worst of its rates', in whatever order they
    come, beside another policy of the same group that allowed."""
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    ip = Identity("ip", "203.0.113.93")
    two = [Limit("two", rate, Algorithm.FIXED_WINDOW) for rate in parse_rates("100/m, 1/h")]
    head = entry_head(user_behind(None), "GET", "/")
    for _ in range(2):
        engine.check([Check(ip, [*two, *API], head, record_every=True)])
    second, first = OffenderReader(engine).detail(ip).hits
    assert first.policies == (("two", "A"), ("api", "A"))
    assert second.outcome == "D" and second.policies == (("two", "D"), ("api", "A"))


def test_a_policy_is_one_denial_however_many_of_its_rates_and_groups_deny(
    redis_client: Any,
) -> None:
    """A request that every rate of a policy denies, in two groups of one identity, is
    one denial of the identity and one of the policy; another policy of a group keeps
    its own count."""
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    ip = Identity("ip", "203.0.113.94")
    both = [Limit("both", rate, Algorithm.FIXED_WINDOW) for rate in parse_rates("1/m, 1/h")]
    more = [Limit(name, rate, Algorithm.GCRA) for name in ("both", "other") for rate in ONE_M]
    for _ in range(3):  # the first passes; each group denies the next two
        engine.check([Check(ip, both), Check(ip, more)])
    offender = OffenderReader(engine).detail(ip).offender
    assert offender is not None
    assert (offender.denials, offender.by_policy) == (2, {"both": 2, "other": 2})
