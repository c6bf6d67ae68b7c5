"""The async engine: the same decisions through redis-py's asyncio client."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio
from django.test import override_settings
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from django_ratelimits.engine import (
    RATE_ALGORITHMS,
    Algorithm,
    Check,
    Engine,
    Identity,
    KeySpace,
    Limit,
    get_engine,
)
from django_ratelimits.engine.aconnection import get_async_redis
from django_ratelimits.exceptions import BackendError
from django_ratelimits.rates import parse_rates
from django_ratelimits.testing import FakeClock
from tests.engine_helpers import EPOCH_US

IP, USER = Identity("ip", "192.0.2.30"), Identity("user", "30")


def request_checks(algorithm: Algorithm) -> list[Check]:
    limits = [Limit("api", rate, algorithm) for rate in parse_rates("5/s, 7/m")]
    return [Check(IP, limits), Check(USER, limits)]


def async_twin(client: Any, harness: Any) -> Any:
    if isinstance(client, RedisCluster):
        host, port = harness.nodes[0]
        return AsyncRedisCluster(host=host, port=port)
    return redis.asyncio.Redis(host=harness.host, port=harness.port)


@pytest.mark.parametrize("algorithm", RATE_ALGORITHMS)
def test_acheck_decides_like_check(
    redis_client: Any, request: pytest.FixtureRequest, algorithm: Algorithm
) -> None:
    name = "redis_cluster" if isinstance(redis_client, RedisCluster) else "redis_standalone"
    harness = request.getfixturevalue(name)

    async def run() -> list[list[bool]]:
        client = async_twin(redis_client, harness)
        engine = Engine(
            redis_client,
            keys=KeySpace(f"a{algorithm.code}"),
            clock=FakeClock(EPOCH_US),
            async_client=lambda: client,
        )
        seen = []
        for _ in range(7):
            decision = await engine.acheck(request_checks(algorithm))
            seen.append([r.allowed for r in decision.results])
        peeked = await engine.apeek(request_checks(algorithm), cost=1)
        seen.append([r.allowed for r in peeked.results])
        await client.aclose()
        return seen

    seen = asyncio.run(run())
    assert seen == [[True] * 4] * 5 + [[False, True, False, True]] * 3


def test_without_an_async_client_the_sync_call_runs_in_a_thread(redis_standalone: Any) -> None:
    engine = Engine(redis_standalone.client(), keys=KeySpace("athread"), clock=FakeClock(EPOCH_US))
    main_thread_busy = []

    async def run() -> bool:
        ticker = asyncio.create_task(asyncio.sleep(0))
        decision = await engine.acheck(request_checks(Algorithm.GCRA))
        main_thread_busy.append(ticker.done())
        return decision.allowed

    assert asyncio.run(run())
    assert main_thread_busy == [True], "the event loop did not run while Redis was asked"


def test_get_engine_gives_an_asyncio_client_per_loop(redis_standalone: Any) -> None:
    with override_settings(DJANGO_RATELIMITS={"REDIS": redis_standalone.url}):
        engine = get_engine()

        async def run() -> Any:
            decision = await engine.acheck(request_checks(Algorithm.FIXED_WINDOW))
            assert decision.allowed
            from django_ratelimits.conf import get_settings

            return get_async_redis(get_settings())

        first, second = asyncio.run(run()), asyncio.run(run())
        assert isinstance(first, redis.asyncio.Redis)
        assert first is not second  # a new loop gets its own connections


def test_a_django_redis_alias_gets_an_asyncio_twin(redis_standalone: Any) -> None:
    caches = {
        "default": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": redis_standalone.url,
            "OPTIONS": {"SOCKET_TIMEOUT": 0.5},
        }
    }
    with override_settings(CACHES=caches, DJANGO_RATELIMITS={}):

        async def run() -> Any:
            decision = await get_engine().acheck(request_checks(Algorithm.SLIDING_LOG))
            assert decision.allowed
            from django_ratelimits.conf import get_settings

            return get_async_redis(get_settings())

        client = asyncio.run(run())
        assert client.connection_pool.connection_kwargs["socket_timeout"] == 0.5
        assert client.connection_pool.connection_kwargs["port"] == redis_standalone.port


def test_an_unreachable_redis_raises_backend_error_async() -> None:
    async def run() -> None:
        dead = redis.asyncio.Redis(port=1, socket_connect_timeout=0.2)
        engine = Engine(redis.Redis(port=1), async_client=lambda: dead)
        await engine.acheck(request_checks(Algorithm.GCRA))

    with pytest.raises(BackendError):
        asyncio.run(run())
