"""Concurrency limits in the engine: slots taken by the check, given back by release,
freed by their lease when nobody gives them back; standalone Redis and a cluster."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from django_ratelimits.engine import Algorithm, Check, Engine, Identity, Limit
from django_ratelimits.engine.controls import Controls
from django_ratelimits.rates import Rate
from django_ratelimits.testing import FakeClock
from tests.engine_helpers import EPOCH_US, fresh_engine

IP, USER = Identity("ip", "198.51.100.80"), Identity("user", "80")
LEASE = 30  # seconds
SLOTS = Limit("uploads", Rate(2, LEASE), Algorithm.CONCURRENCY)
HOURLY = Limit("hourly", Rate(100, 3600), Algorithm.FIXED_WINDOW)


def in_flight(engine: Engine, identity: Identity, limit: Limit = SLOTS) -> int:
    """Slots held now, as a peek reports them (the limit less what remains)."""
    result = engine.peek([Check(identity, [limit])]).results[0]
    return limit.rate.limit - result.remaining


def test_admits_n_refuses_the_next_and_a_release_frees_one(redis_client: Any) -> None:
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    first, second, third = (engine.check([Check(IP, [SLOTS])]) for _ in range(3))
    assert [first.allowed, second.allowed, third.allowed] == [True, True, False]
    assert [first.results[0].remaining, second.results[0].remaining] == [1, 0]
    refused = third.results[0]
    assert (refused.remaining, refused.retry_after_us) == (0, 1_000_000)
    assert third.held == (), "a refused request holds nothing"
    assert in_flight(engine, IP) == 2

    engine.release(first.held[0])
    assert in_flight(engine, IP) == 1
    assert engine.check([Check(IP, [SLOTS])]).allowed
    assert not engine.check([Check(IP, [SLOTS])]).allowed


def test_releasing_twice_gives_back_only_its_own_slot(redis_client: Any) -> None:
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    mine, theirs = (engine.check([Check(IP, [SLOTS])]) for _ in range(2))
    engine.release(mine.held[0])
    engine.release(mine.held[0])
    assert mine.held[0].released
    assert in_flight(engine, IP) == 1, "the other request's slot is still held"
    engine.release(theirs.held[0])
    assert in_flight(engine, IP) == 0


def test_a_slot_nobody_releases_is_freed_when_its_lease_ends(redis_client: Any) -> None:
    clock = FakeClock(EPOCH_US)
    engine = fresh_engine(redis_client, clock)
    for _ in range(2):
        assert engine.check([Check(IP, [SLOTS])]).allowed  # then the worker dies
    clock.advance(us=LEASE * 1_000_000 - 1)
    assert not engine.check([Check(IP, [SLOTS])]).allowed, "freed before its lease ended"
    clock.advance(us=1)
    assert in_flight(engine, IP) == 0
    assert engine.check([Check(IP, [SLOTS])]).allowed


def test_the_slots_zset_stays_bounded_and_expires(redis_client: Any) -> None:
    clock = FakeClock(EPOCH_US)
    engine = fresh_engine(redis_client, clock)
    key = engine.keys.of(IP).log(SLOTS)
    for _ in range(50):  # never released: each pair expires before the next
        engine.check([Check(IP, [SLOTS])])
        engine.check([Check(IP, [SLOTS])])
        clock.advance(seconds=LEASE)
    assert redis_client.zcard(key) <= SLOTS.rate.limit
    assert 0 < redis_client.pttl(key) <= (LEASE + 60) * 1000  # + the test clock's slack


def test_a_peek_takes_no_slot(redis_client: Any) -> None:
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    for _ in range(5):
        assert engine.peek([Check(IP, [SLOTS])], cost=1).allowed
    assert in_flight(engine, IP) == 0


def test_another_limit_denying_takes_no_slot(redis_client: Any) -> None:
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    once = Limit("once", Rate(1, 3600), Algorithm.FIXED_WINDOW)
    assert engine.check([Check(IP, [once])]).allowed
    denied = engine.check([Check(IP, [SLOTS, once])])
    assert not denied.allowed
    assert in_flight(engine, IP) == 0, "a denied group took a slot"


def test_a_concurrency_denial_charges_no_other_limit(redis_client: Any) -> None:
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    for _ in range(2):
        assert engine.check([Check(IP, [SLOTS, HOURLY])]).allowed
    for _ in range(5):
        assert not engine.check([Check(IP, [SLOTS, HOURLY])]).allowed
    left = engine.peek([Check(IP, [HOURLY])]).results[0].remaining
    assert left == 98, "the refused requests were counted by the hourly limit"


def test_one_release_frees_the_slots_of_every_identity(redis_client: Any) -> None:
    """Two identities may live on two cluster nodes: the release reaches both."""
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    decision = engine.check([Check(IP, [SLOTS]), Check(USER, [SLOTS])])
    assert decision.allowed
    (held,) = decision.held
    assert len(held.keys) == 2
    assert (in_flight(engine, IP), in_flight(engine, USER)) == (1, 1)
    engine.release(held)
    assert (in_flight(engine, IP), in_flight(engine, USER)) == (0, 0)


def test_a_release_after_a_script_flush_loads_the_script_again(redis_standalone: Any) -> None:
    client = redis_standalone.client()
    engine = fresh_engine(client, FakeClock(EPOCH_US))
    decision = engine.check([Check(IP, [SLOTS])])
    client.script_flush()
    engine.release(decision.held[0])
    assert in_flight(engine, IP) == 0


def test_reset_frees_the_slots(redis_client: Any) -> None:
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    for _ in range(2):
        engine.check([Check(IP, [SLOTS])])
    Controls(engine).reset(IP, [SLOTS])
    assert in_flight(engine, IP) == 0


def test_no_other_check_sends_a_request_id(redis_client: Any) -> None:
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    calls = engine._prepare([Check(IP, [HOURLY])], "c", 1)
    assert b"r" not in calls[0].args
    assert engine.check([Check(IP, [HOURLY])]).held == ()


def test_arelease_gives_back_through_the_asyncio_client(
    redis_client: Any, request: pytest.FixtureRequest
) -> None:
    cluster = isinstance(redis_client, RedisCluster)
    harness = request.getfixturevalue("redis_cluster" if cluster else "redis_standalone")

    async def run() -> tuple[int, int, int]:
        if cluster:
            host, port = harness.nodes[0]
            client: Any = AsyncRedisCluster(host=host, port=port)
        else:
            client = redis.asyncio.Redis(host=harness.host, port=harness.port)
        engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
        engine._async_client = lambda: client
        decision = await engine.acheck([Check(IP, [SLOTS]), Check(USER, [SLOTS])])
        held = in_flight(engine, IP) + in_flight(engine, USER)
        await client.script_flush()  # the release loads its script again
        await engine.arelease(decision.held[0])
        await client.aclose()
        return held, in_flight(engine, IP), in_flight(engine, USER)

    assert asyncio.run(run()) == (2, 0, 0)
