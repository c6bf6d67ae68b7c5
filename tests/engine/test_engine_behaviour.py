"""What users of the engine rely on, on standalone Redis and on a cluster."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from django_ratelimits.decorators import ratelimit
from django_ratelimits.engine import (
    RATE_ALGORITHMS,
    Algorithm,
    Check,
    Engine,
    Gate,
    Identity,
    Limit,
)
from django_ratelimits.engine.controls import Controls
from django_ratelimits.exceptions import BackendError
from django_ratelimits.rates import Rate, parse_rates
from django_ratelimits.testing import FakeClock
from tests.engine_helpers import EPOCH_US, fresh_engine

IP = Identity("ip", "198.51.100.4")
USER = Identity("user", "7")
# The longest retry/reset, in windows: the sliding window spans one extra
# bucket; the weighted counter still counts the whole previous window.
LONGEST_WAIT = {a: 1.0 for a in RATE_ALGORITHMS} | {
    Algorithm.SLIDING_WINDOW: 1.1,
    Algorithm.SLIDING_WINDOW_COUNTER: 2.0,
}


def limits(rates: str, algorithm: Algorithm, policy: str = "api") -> list[Limit]:
    return [Limit(policy, rate, algorithm) for rate in parse_rates(rates)]


@pytest.mark.parametrize("algorithm", RATE_ALGORITHMS)
def test_admits_exactly_the_limit_then_denies_until_retry_after(
    redis_client: Any, algorithm: Algorithm
) -> None:
    # Start on a second boundary so the fixed windows hold the whole burst.
    clock = FakeClock(EPOCH_US)
    engine = fresh_engine(redis_client, clock)
    checks = [Check(IP, limits("5/s", algorithm))]
    admitted = [engine.check(checks).allowed for _ in range(8)]
    assert admitted == [True] * 5 + [False] * 3

    denied = engine.check(checks)
    assert not denied.allowed
    assert denied.results[0].remaining == 0
    assert 0 < denied.retry_after_us <= LONGEST_WAIT[algorithm] * 1_000_000

    clock.advance(us=denied.retry_after_us - 1)
    assert not engine.check(checks).allowed, "admitted before Retry-After"
    clock.advance(us=1)
    assert engine.check(checks).allowed, "still denied at Retry-After"


@pytest.mark.parametrize("algorithm", RATE_ALGORITHMS)
def test_remaining_counts_down_and_reset_is_whole_quota(
    redis_client: Any, algorithm: Algorithm
) -> None:
    clock = FakeClock(EPOCH_US)
    engine = fresh_engine(redis_client, clock)
    checks = [Check(IP, limits("4/m", algorithm))]
    assert [engine.check(checks).results[0].remaining for _ in range(4)] == [3, 2, 1, 0]
    reset = engine.peek(checks).results[0].reset_after_us
    assert 0 < reset <= LONGEST_WAIT[algorithm] * 60_000_000
    clock.advance(us=reset)
    assert engine.peek(checks).results[0].remaining == 4


@pytest.mark.parametrize("algorithm", RATE_ALGORITHMS)
def test_a_limit_of_its_own_cost_is_charged_that_cost(
    redis_client: Any, algorithm: Algorithm
) -> None:
    """A policy's cost per request (``Check.costs``) is charged whole, by every algorithm:
    the sliding log wrote the call's cost (1) instead, and admitted 6 requests of cost 5
    under 10/h (found by an exactness review)."""
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    costly = [Check(IP, limits("10/h", algorithm), costs=(5,))]
    assert [engine.check(costly).allowed for _ in range(4)] == [True, True, False, False]
    assert engine.peek([Check(IP, limits("10/h", algorithm))]).results[0].remaining == 0


@pytest.mark.parametrize("algorithm", RATE_ALGORITHMS)
def test_a_cost_of_thousands_is_charged_whole(redis_client: Any, algorithm: Algorithm) -> None:
    """A cost admin accepts (up to the rate's limit) is charged by every algorithm: the
    sliding log wrote one ZADD of all its members, which Lua's unpack() refuses past
    about 8000 values, so a cost of 5000 failed the check (fail-open: no limit)."""
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    costly = [Check(IP, limits("10000/h", algorithm), costs=(5000,))]
    assert [engine.check(costly).allowed for _ in range(3)] == [True, True, False]
    assert engine.peek([Check(IP, limits("10000/h", algorithm))]).results[0].remaining == 0


@pytest.mark.parametrize("algorithm", [Algorithm.FIXED_WINDOW, Algorithm.SLIDING_LOG])
def test_thousands_of_limits_on_one_identity_are_all_decided(
    redis_client: Any, algorithm: Algorithm
) -> None:
    """Admin bounds no number of policies one request matches: an identity checked
    against thousands of limits in one call is decided, charged and denied like one with
    a few. (The script unpacked every limit's outcome, field and value into one Redis
    command or reply, which Lua refuses past about 8000 values: from about 2000 limits
    every check failed, and the requests went through unlimited.)"""
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    many = [Limit(f"p{i}", Rate(1, 3600), algorithm) for i in range(2500)]
    first = engine.check([Check(IP, many)])
    assert first.allowed and len(first.results) == len(many)
    assert {r.remaining for r in first.results} == {0}
    second = engine.check([Check(IP, many)])
    assert not any(r.allowed for r in second.results) and len(second.results) == len(many)


@pytest.mark.parametrize("algorithm", RATE_ALGORITHMS)
def test_a_denied_identity_is_charged_nothing(redis_client: Any, algorithm: Algorithm) -> None:
    """All or nothing per identity: the 10/s rate is untouched while 2/m denies."""
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    checks = [Check(IP, limits("10/s, 2/m", algorithm))]
    engine.check(checks)
    engine.check(checks)
    for _ in range(5):
        decision = engine.check(checks)
        assert not decision.allowed
        assert [r.allowed for r in decision.results] == [True, False]
    per_second = engine.peek(checks).results[0]
    assert per_second.remaining == 8, "denied requests were charged to the 10/s window"


@pytest.mark.parametrize("algorithm", [*RATE_ALGORITHMS, Algorithm.CONCURRENCY])
def test_a_soft_check_never_stops_its_identitys_other_limits(
    redis_client: Any, algorithm: Algorithm
) -> None:
    """A soft check (a view's policy with block=False) is spent: the request goes on,
    so the identity's other limits must still count it."""
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    soft = Check(IP, limits("1/m", algorithm, "soft"), soft=True)
    hard = Check(IP, limits("3/m", algorithm, "hard"))
    outcomes = [[r.allowed for r in engine.check([soft, hard]).results] for _ in range(5)]
    # Given first, the soft check is still decided after the one it waits on.
    assert outcomes == [[True, True], [True, False], [True, False], [False, False], [False, False]]
    assert engine.peek([hard]).results[0].remaining == 0


@pytest.mark.parametrize("algorithm", [*RATE_ALGORITHMS, Algorithm.CONCURRENCY])
def test_a_refused_request_charges_no_soft_check_of_its_identity(
    redis_client: Any, algorithm: Algorithm
) -> None:
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    soft = Check(IP, limits("5/m", algorithm, "soft"), soft=True)
    hard = Check(IP, limits("1/m", algorithm, "hard"))
    other = Check(USER, limits("5/m", algorithm, "soft-user"), soft=True)
    for _ in range(4):
        engine.check([hard, soft, other])
    # Three requests were refused by the address's hard limit: the soft limits, the
    # address's and the user's, counted only the one let through.
    assert engine.peek([soft]).results[0].remaining == 4
    assert engine.peek([other]).results[0].remaining == 4


def _apart(engine: Engine, one: Identity, other: Identity) -> bool:
    """Whether two identities' keys live in different slots (always, standalone)."""
    return engine._slot(engine.keys.of(one).encoded_state) != engine._slot(
        engine.keys.of(other).encoded_state
    ) or not isinstance(engine.client, RedisCluster)


@pytest.mark.parametrize("gated", ["refusing", "soft"])
def test_a_soft_check_waits_for_a_refusing_check_decided_in_another_call(
    redis_client: Any, gated: str
) -> None:
    """On a cluster a gated identity in another slot than its client IP is decided in a
    second round trip: a soft check of it must still wait for its refusing check."""
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    client = Identity("ip", "198.51.100.4")
    assert _apart(engine, USER, client)
    gate = Gate(client, Rate(5, 3600))
    hard = Check(USER, limits("1/m", Algorithm.FIXED_WINDOW, "hard"))
    soft = Check(USER, limits("5/m", Algorithm.FIXED_WINDOW, "soft"), soft=True)
    if gated == "refusing":
        hard = replace(hard, gate=gate)
    else:
        soft = replace(soft, gate=gate)
    decisions = [engine.check([soft, hard]) for _ in range(4)]
    assert [d.allowed for d in decisions] == [True, False, False, False]
    assert engine.peek([replace(soft, gate=None)]).results[0].remaining == 4


def test_a_request_its_address_refuses_for_a_user_over_budget_costs_the_soft_check_nothing(
    redis_client: Any,
) -> None:
    """A user past the address's identity budget is counted against the address, which
    refuses: the user's soft check (under another budget, or none) is not charged."""
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    client = Identity("ip", "198.51.100.4")
    hard = limits("1/m", Algorithm.FIXED_WINDOW, "hard")
    gate = Gate(client, Rate(1, 3600))
    engine.check([Check(Identity("user", "other"), hard, gate=gate)])  # takes the one place
    soft = Check(USER, limits("5/m", Algorithm.FIXED_WINDOW, "soft"), soft=True)
    decisions = [engine.check([Check(USER, hard, gate=gate), soft]) for _ in range(4)]
    # Counted against the address (1/m): one let through, three refused.
    assert [d.allowed for d in decisions] == [True, False, False, False]
    assert engine.peek([soft]).results[0].remaining == 4


def test_identities_are_decided_separately(redis_client: Any) -> None:
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    user_limits = limits("2/m", Algorithm.FIXED_WINDOW, "user")
    ip_limits = limits("3/m", Algorithm.FIXED_WINDOW, "ip")
    request = [Check(IP, ip_limits), Check(USER, user_limits)]
    assert [engine.check(request).allowed for _ in range(3)] == [True, True, False]
    third = engine.peek(request)
    # The third request was denied by the user limit only; the IP was charged.
    assert [r.remaining for r in third.results] == [0, 0]
    assert engine.check([Check(IP, ip_limits)]).allowed is False


def test_peek_writes_nothing(redis_client: Any) -> None:
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    checks = [Check(IP, limits("3/m", algorithm)) for algorithm in RATE_ALGORITHMS]
    checks = [Check(Identity("ip", str(n)), c.limits, metadata="u|/") for n, c in enumerate(checks)]
    for _ in range(10):
        decision = engine.peek(checks, cost=1)
        assert decision.allowed
        assert {r.remaining for r in decision.results} == {2}
    prefix = engine.keys.prefix.encode()
    assert not [k for k in redis_client.keys("*") if k.startswith(prefix)]


def test_cost_is_a_weight(redis_client: Any) -> None:
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    checks = [Check(IP, limits("10/m", Algorithm.SLIDING_LOG))]
    assert engine.check(checks, cost=7).results[0].remaining == 3
    assert not engine.check(checks, cost=4).allowed
    assert engine.check(checks, cost=3).allowed


def test_cost_above_a_capacity_is_a_programming_error(redis_client: Any) -> None:
    engine = fresh_engine(redis_client)
    with pytest.raises(ValueError, match="could never pass"):
        engine.check([Check(IP, limits("5/m", Algorithm.GCRA))], cost=6)
    with pytest.raises(ValueError, match="at least 1"):
        engine.check([Check(IP, limits("5/m", Algorithm.GCRA))], cost=0)


def test_burst_sets_the_bucket_capacity(redis_client: Any) -> None:
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    for algorithm in (Algorithm.TOKEN_BUCKET, Algorithm.GCRA):
        checks = [Check(IP, [Limit("b", Rate(1, 1), algorithm, burst=20)])]
        assert sum(engine.check(checks).allowed for _ in range(25)) == 20


@pytest.mark.parametrize("burst", [2.0, 2.5, True])
def test_a_burst_is_a_whole_number(redis_client: Any, burst: object) -> None:
    """A burst of 2.0 (or True) was accepted and written into the limit's spec as "2.0",
    which the check script reads as digits: every check of the identity failed, and the
    request path let it through (fail-open). It is refused like a burst of 0."""
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    checks = [Check(IP, [Limit("b", Rate(10, 1), Algorithm.TOKEN_BUCKET, burst=2)])]
    assert [engine.check(checks).allowed for _ in range(3)] == [True, True, False]
    with pytest.raises(ValueError, match="burst_range"):
        Limit("b", Rate(10, 1), Algorithm.TOKEN_BUCKET, burst=burst)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="burst"):
        ratelimit("b", rate="10/s", algorithm="token_bucket", burst=burst)  # type: ignore[arg-type]


def test_a_limit_given_twice_is_rejected(redis_client: Any) -> None:
    engine = fresh_engine(redis_client)
    twice = limits("5/m", Algorithm.GCRA) * 2
    with pytest.raises(ValueError, match="twice"):
        engine.check([Check(IP, twice)])


def test_empty_request_needs_no_redis(redis_client: Any) -> None:
    engine = fresh_engine(redis_client)
    decision = engine.check([Check(IP, [])])
    assert decision.allowed and decision.results == ()


def test_uses_redis_time_without_a_clock(redis_client: Any) -> None:
    engine = fresh_engine(redis_client)
    decision = engine.check([Check(IP, limits("5/s", Algorithm.GCRA))])
    seconds, micros = redis_client.time()
    assert abs(decision.now_us - (seconds * 1_000_000 + micros)) < 5_000_000


def _flush_code(client: Any) -> None:
    """Drop the check's code from Redis: its script cache and, on Redis 7, its functions."""
    nodes = {"target_nodes": RedisCluster.PRIMARIES} if isinstance(client, RedisCluster) else {}
    client.execute_command("SCRIPT", "FLUSH", **nodes)
    if _version(client) >= (7,):
        client.execute_command("FUNCTION", "FLUSH", **nodes)


def _version(client: Any) -> tuple[int, ...]:
    nodes = {"target_nodes": RedisCluster.RANDOM} if isinstance(client, RedisCluster) else {}
    info = client.info("server", **nodes)
    return tuple(int(part) for part in str(info["redis_version"]).split("."))


def test_recovers_when_redis_lost_the_code(redis_client: Any) -> None:
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    checks = [
        Check(IP, limits("3/m", Algorithm.FIXED_WINDOW)),
        Check(USER, limits("3/m", Algorithm.GCRA)),
    ]
    engine.check(checks)
    _flush_code(redis_client)
    assert [r.remaining for r in engine.check(checks).results] == [1, 1]
    assert [r.remaining for r in engine.check(checks).results] == [0, 0]


@pytest.mark.parametrize("redis_client", ["standalone"], indirect=True)
def test_redis_7_runs_the_check_as_a_function(redis_client: Any) -> None:
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    checks = [Check(IP, limits("3/m", Algorithm.SLIDING_WINDOW))]
    engine.check(checks)
    stats = redis_client.info("commandstats")
    before = {c: stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in ("fcall", "evalsha")}
    engine.check(checks)
    stats = redis_client.info("commandstats")
    after = {c: stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in ("fcall", "evalsha")}
    used = "fcall" if _version(redis_client) >= (7,) else "evalsha"
    assert {c: after[c] - before[c] for c in after} == {
        c: int(c == used) for c in ("fcall", "evalsha")
    }


def test_reset_clears_one_policy_or_everything(redis_client: Any) -> None:
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    login, api = limits("1/h", Algorithm.SLIDING_LOG, "login"), limits("1/h", Algorithm.GCRA, "api")
    request = [Check(IP, login + api, metadata="u|/")]
    engine.check(request)
    assert not engine.check(request).allowed
    Controls(engine).reset(IP, login)
    assert [r.allowed for r in engine.peek(request, cost=1).results] == [True, False]
    Controls(engine).reset(IP, login + api, forget=True)
    assert engine.peek(request, cost=1).allowed
    prefix = engine.keys.prefix.encode()
    assert not [
        k for k in redis_client.keys("*") if k.startswith(prefix) and not k.endswith(b":ox")
    ]


def test_an_unreachable_redis_raises_backend_error(redis_standalone: Any) -> None:
    dead = redis.Redis(port=1, socket_connect_timeout=0.2, socket_timeout=0.2)
    engine = Engine(dead)
    with pytest.raises(BackendError):
        engine.check([Check(IP, limits("5/s", Algorithm.GCRA))])
    with pytest.raises(BackendError):
        Controls(engine).reset(IP, limits("5/s", Algorithm.GCRA), forget=True)


@pytest.mark.parametrize("redis_client", ["standalone"], indirect=True)
def test_a_user_without_functions_runs_the_check_as_a_script(
    redis_client: Any, redis_standalone: Any
) -> None:
    # On Redis 6 there are no functions to refuse: every check is a script there too.
    refused = ["-fcall", "-function"] if _version(redis_client) >= (7,) else []
    redis_client.execute_command(
        "ACL", "SETUSER", "nofunctions", "on", ">secret", "~*", "+@all", *refused
    )
    try:
        client = redis.Redis(
            host=redis_standalone.host,
            port=redis_standalone.port,
            username="nofunctions",
            password="secret",
        )
        engine = fresh_engine(client, FakeClock(EPOCH_US))
        checks = [Check(IP, limits("2/m", Algorithm.SLIDING_WINDOW))]
        assert [engine.check(checks).allowed for _ in range(3)] == [True, True, False]
        assert engine.check_command == "EVALSHA"
    finally:
        redis_client.execute_command("ACL", "DELUSER", "nofunctions")


def test_decisions_stay_exact_past_the_limit_sets_the_script_keeps_parsed(
    redis_client: Any,
) -> None:
    """The script keeps at most 1,000 parsed limit sets between calls (check.lua's
    CACHE_MAX) and starts afresh past them: a set parsed again after that decides as
    before, and a look (a call of other settings) between the checks changes nothing."""
    clock = FakeClock(EPOCH_US)
    engine = fresh_engine(redis_client, clock)
    first = [Check(IP, limits("3/h", Algorithm.GCRA, "p0"))]
    assert engine.check(first).results[0].remaining == 2
    for n in range(1, 1_201):
        others = [Check(IP, limits(f"{n + 3}/h", Algorithm.GCRA, f"p{n}"))]
        assert engine.check(others).results[0].remaining == n + 2
        if n % 300 == 0:
            assert engine.peek(first).results[0].remaining == 2
    assert [engine.check(first).results[0].remaining for _ in range(3)] == [1, 0, 0]


def test_thousands_of_limit_sets_cost_the_library_bounded_memory(clean_standalone: Any) -> None:
    """A policy editor's thousands of policies (or tiers and overrides, each a limit set
    of its own) cannot grow what the Redis 7 library keeps parsed: 6,000 distinct sets
    grew it by about 1.6 MB, bounded; kept without a bound, by about 9.5 MB."""
    if clean_standalone.version < (7,):
        pytest.skip("parsed sets are kept by the Redis 7 function library only")
    client = clean_standalone.client()
    engine = fresh_engine(client, FakeClock(EPOCH_US))
    engine.check([Check(IP, limits("3/h", Algorithm.GCRA, "p0"))])  # the library loaded
    before = client.info("memory")["used_memory_vm_functions"]
    for n in range(1, 6_001):
        assert engine.check([Check(IP, limits(f"{n + 3}/h", Algorithm.GCRA, f"p{n}"))]).allowed
    grown = client.info("memory")["used_memory_vm_functions"] - before
    assert grown < 3_000_000
