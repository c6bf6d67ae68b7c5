"""The async engine: the same decisions through redis-py's asyncio client."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio
from django.conf import settings
from django.test import override_settings
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from devtools.redis_harness import RedisServer as HarnessServer
from django_ratelimits.conf import get_settings
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
from django_ratelimits.engine.aconnection import get_async_redis, make_async_redis
from django_ratelimits.exceptions import BackendError
from django_ratelimits.rates import parse_rates
from django_ratelimits.testing import FakeClock, fake_clock
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
    # The suite's timeouts kept (a connect within the default 0.25 s failed once on a
    # busy CI machine): this test is about clients per loop, not timeouts.
    with override_settings(
        DJANGO_RATELIMITS={**settings.DJANGO_RATELIMITS, "REDIS": redis_standalone.url}
    ):
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


SECRET = "s3cret-of-the-limiter"


@pytest.fixture
def guarded(tmp_path: Path, redis_binary: Path) -> Iterator[HarnessServer]:
    """A Redis of its own that lets in only the ACL user ``limiter`` with ``SECRET``
    (the default user is turned off once it answers PING)."""
    server = HarnessServer(tmp_path / "guarded", binary=redis_binary, name="guarded")
    server.start()
    with server.client() as conn:
        conn.acl_setuser(
            "limiter", enabled=True, passwords=[f"+{SECRET}"], keys=["*"], commands=["+@all"]
        )
        conn.acl_setuser("default", enabled=False)
    try:
        yield server
    finally:
        server.stop()


def test_a_django_redis_alias_s_asyncio_twin_takes_its_pool_options(
    guarded: HarnessServer,
) -> None:
    """The asyncio twin of an alias is made with the options django-redis makes the
    sync client's pool with, ``CONNECTION_POOL_KWARGS`` among them (the documented place
    for a username, a password, ``ssl_cert_reqs``). It kept only ``LOCATION``, the
    timeouts and ``PASSWORD``: against a Redis asking for credentials, every async check
    failed (and requests passed open) where sync ones were counted."""
    pool_options = {"username": "limiter", "password": SECRET}
    caches = {
        "default": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": guarded.url,
            "OPTIONS": {"SOCKET_TIMEOUT": 5, "CONNECTION_POOL_KWARGS": pool_options},
        }
    }
    checks = request_checks(Algorithm.FIXED_WINDOW)
    # On the test kit's clock: the 5/s window must not turn between the three checks,
    # which on Redis' own clock it did on a busy machine (a count of 4 again).
    with fake_clock(), override_settings(CACHES=caches, DJANGO_RATELIMITS={}):
        engine = get_engine()

        async def run() -> list[int]:
            return [(await engine.acheck(checks)).results[0].remaining for _ in range(2)]

        assert engine.check(checks).results[0].remaining == 4
        assert asyncio.run(run()) == [3, 2]  # the same counter, through the asyncio twin


def test_an_alias_s_ssl_options_reach_its_asyncio_twin() -> None:
    """Made without the network: a ``rediss://`` alias' ``ssl_cert_reqs`` and OPTIONS'
    ``USERNAME`` are the twin's, as they are the sync pool's."""
    from django_redis import get_redis_connection

    caches = {
        "default": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": "rediss://127.0.0.1:1/3",
            "OPTIONS": {"USERNAME": "limiter", "CONNECTION_POOL_KWARGS": {"ssl_cert_reqs": "none"}},
        }
    }
    with override_settings(CACHES=caches, DJANGO_RATELIMITS={}):
        twin = make_async_redis(get_settings())
        assert isinstance(twin, redis.asyncio.Redis)
        pool = twin.connection_pool
        assert pool.connection_class is redis.asyncio.SSLConnection
        sync = get_redis_connection("default").connection_pool.connection_kwargs
        for option in ("ssl_cert_reqs", "username", "host", "port", "db"):
            assert pool.connection_kwargs.get(option) == sync.get(option), option
        assert pool.connection_kwargs["ssl_cert_reqs"] == "none"
        # OPTIONS' USERNAME: later django-redis releases pass it on; 5.4.0, the lowest
        # this package takes, drops it from the sync pool, and so from the twin.
        assert sync.get("username") in ("limiter", None)
