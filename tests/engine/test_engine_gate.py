"""Identity budgets: a client rotating chosen identities (API keys, accounts, callable
keys) gets a bounded number through, and stores a bounded amount, on standalone Redis
and on a cluster."""

from __future__ import annotations

from typing import Any

import pytest
from redis.cluster import RedisCluster

from django_ratelimits.engine import Check, Engine, Gate, Identity, Limit
from django_ratelimits.rates import Rate, parse_rates
from django_ratelimits.testing import FakeClock
from tests.engine_helpers import EPOCH_US, all_keys, check_calls, fresh_engine

CLIENT = Identity("ip", "198.51.100.4")
BUDGET = Rate(3, 3600)
LIMITS = [Limit("api", rate) for rate in parse_rates("2/h")]


def keyed(value: str, budget: Rate = BUDGET) -> Check:
    return Check(Identity("header", value), LIMITS, gate=Gate(CLIENT, budget))


def rotate(engine: Engine, count: int, start: int = 0) -> list[Identity | None]:
    """One request for each of ``count`` new values: who admitted it (None: denied)."""
    admitted: list[Identity | None] = []
    for n in range(start, start + count):
        decision = engine.check([keyed(f"rotated-{n}")])
        admitted.append(decision.results[0].identity if decision.allowed else None)
    return admitted


def test_a_client_rotating_values_gets_the_budget_then_the_limit_of_its_address(
    redis_client: Any,
) -> None:
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    admitted = rotate(engine, 20)
    own = [Identity("header", f"rotated-{n}") for n in range(3)]
    assert admitted == own + [CLIENT, CLIENT] + [None] * 15


def test_past_the_budget_a_new_value_stores_nothing(redis_client: Any) -> None:
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    rotate(engine, 10)
    keys = set(all_keys(redis_client))
    rotate(engine, 200, start=10)
    assert set(all_keys(redis_client)) == keys


def test_a_known_value_passes_however_many_new_ones_its_address_sends(redis_client: Any) -> None:
    clock = FakeClock(EPOCH_US)
    engine = fresh_engine(redis_client, clock)
    honest = keyed("honest")
    assert engine.check([honest]).results[0].identity == honest.identity
    rotate(engine, 50)
    clock.advance(1800)  # the known value stays known while it is used within the period
    decision = engine.check([honest])
    assert decision.allowed
    assert decision.results[0].identity == honest.identity
    assert decision.results[0].remaining == 0, "the value's own limit counts it"


def test_values_within_the_budget_keep_their_own_limits(redis_client: Any) -> None:
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    for _ in range(2):
        for n in range(3):
            decision = engine.check([keyed(f"team-{n}")])
            assert decision.allowed
            assert decision.results[0].identity == Identity("header", f"team-{n}")
    third = engine.check([keyed("team-0")])
    assert not third.allowed
    assert third.results[0].identity == Identity("header", "team-0")


def test_a_place_in_the_budget_frees_a_period_after_its_value_was_last_seen(
    redis_client: Any,
) -> None:
    clock = FakeClock(EPOCH_US)
    engine = fresh_engine(redis_client, clock)
    rotate(engine, 3)
    clock.advance(3599)
    assert rotate(engine, 1, start=3) == [CLIENT]
    clock.advance(1)
    assert rotate(engine, 1, start=4) == [Identity("header", "rotated-4")]


def test_a_place_is_renewed_once_its_time_is_an_eighth_of_the_period_old(
    redis_client: Any,
) -> None:
    """A value's place is renewed by a request an eighth of the period after the time it
    holds, and not sooner (a busy value writes its ZSET once an eighth of a period, not
    on every request): it is given back a period after that time, so between 7/8 of a
    period and a period after the value's last request (docs/client-ip.md)."""
    clock = FakeClock(EPOCH_US)
    engine = fresh_engine(redis_client, clock)
    roomy = [Limit("api", rate) for rate in parse_rates("100/h")]

    def who(value: str) -> Identity:
        check = Check(Identity("header", value), roomy, gate=Gate(CLIENT, BUDGET))
        return engine.check([check]).results[0].identity

    assert [who(v) for v in "abc"] == [Identity("header", v) for v in "abc"]  # 3 of 3 places
    clock.advance(BUDGET.period // 8 - 1)
    assert who("a") == Identity("header", "a")  # too soon: a's time stays 0
    clock.advance(1)
    assert [who("b"), who("c")] == [Identity("header", "b"), Identity("header", "c")]  # renewed
    clock.advance(BUDGET.period - BUDGET.period // 8 + 1)  # a period and a second after 0
    assert who("d") == Identity("header", "d")  # a's place was given back
    assert who("a") == CLIENT  # b, c and d hold the three places: a counts as its address


def test_a_user_over_budget_is_counted_against_its_address_once(redis_client: Any) -> None:
    """A policy counting the address and the user (two checks of the same limits): a
    user past the address's budget is counted against the address, which this
    request already counts, so once and not twice."""
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    limits = [Limit("api", rate) for rate in parse_rates("10/h")]
    budget = Rate(2, 3600)
    decisions = [
        engine.check(
            [
                Check(CLIENT, limits),
                Check(Identity("user", str(n)), limits, gate=Gate(CLIENT, budget)),
            ]
        )
        for n in range(12)
    ]
    assert [d.allowed for d in decisions] == [True] * 10 + [False] * 2
    over = decisions[2]  # the third user: past the budget
    assert [(r.identity, r.remaining) for r in over.results] == [(CLIENT, 7)]


def test_peek_answers_as_check_would_and_writes_no_budget(redis_client: Any) -> None:
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    rotate(engine, 3)
    keys = set(all_keys(redis_client))
    peeked = engine.peek([keyed("next")])
    assert peeked.results[0].identity == CLIENT
    assert set(all_keys(redis_client)) == keys
    assert engine.check([keyed("next")]).results[0].identity == CLIENT


def test_the_budget_key_holds_at_most_the_budget_and_expires(redis_client: Any) -> None:
    engine = fresh_engine(redis_client)  # Redis' own clock: real TTLs
    for n in range(30):
        engine.check([keyed(f"rotated-{n}")])
    gate = engine.keys.of(CLIENT).gate("header", BUDGET)
    assert redis_client.zcard(gate) == 3
    assert 0 < redis_client.pttl(gate) <= 3600 * 1000
    for key in all_keys(redis_client):
        assert redis_client.pttl(key) > 0, key


def test_a_client_over_budget_is_the_offender_not_its_values(redis_client: Any) -> None:
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    rotate(engine, 10)
    indexed = set()
    for shard in range(engine.keys.shards):
        indexed |= set(redis_client.zrange(engine.keys.index(shard), 0, -1))
    assert indexed == {engine.keys.of(CLIENT).ident.encode()}


def test_a_gated_check_is_one_call_on_standalone_and_at_most_two_on_a_cluster(
    redis_client: Any, request: pytest.FixtureRequest
) -> None:
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    cluster = isinstance(redis_client, RedisCluster)
    nodes = request.getfixturevalue("redis_cluster").node_clients() if cluster else [redis_client]
    honest = [keyed("honest"), Check(CLIENT, [Limit("ip", Rate(100, 1))])]
    engine.check(honest)  # loads the code on every node it reaches
    before = check_calls(*nodes)
    engine.check(honest)
    calls = check_calls(*nodes) - before
    assert (1 <= calls <= 2) if cluster else calls == 1, calls
    rotate(engine, 5)
    before = check_calls(*nodes)
    engine.check([keyed("over-budget")])
    assert check_calls(*nodes) - before == 1, "a refused identity needs no second call"
