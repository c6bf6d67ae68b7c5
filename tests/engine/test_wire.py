"""The check's short way to Redis (engine/wire.py) keeps what execute_command promises."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
import redis
import redis.asyncio
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.connection import Connection as AsyncConnection
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.connection import Connection
from redis.retry import Retry

from devtools.redis_harness import RedisClusterHarness, RedisServer
from django_ratelimits.engine import Check, Engine, Identity, KeySpace, Limit, wire
from django_ratelimits.rates import parse_rates


@pytest.fixture
def server(redis_standalone: RedisServer) -> Iterator[RedisServer]:
    if not redis_standalone.is_running():
        redis_standalone.start()
    with redis_standalone.client() as conn:
        conn.flushall()
    yield redis_standalone
    if not redis_standalone.is_running():
        redis_standalone.start()


@pytest.mark.parametrize(
    "args",
    [
        ("PING",),
        ("SET", "k", b"\x00\r\n\xff", 0),
        ("FCALL", "f", 1, b"P:{s1}:s:ip:1", "", b"c|1|50", "é", -17, 2**62),
    ],
)
def test_a_command_is_packed_as_redis_py_packs_it(args: tuple[object, ...]) -> None:
    assert wire.pack(args) == b"".join(Connection().pack_command(*args))  # type: ignore[arg-type]


def test_a_plain_client_sends_directly_and_the_others_do_not(
    server: RedisServer, redis_cluster: RedisClusterHarness
) -> None:
    assert wire.sends_directly(redis.Redis.from_url(server.url))
    single = redis.Redis.from_url(server.url, single_connection_client=True)
    assert not wire.sends_directly(single)  # its one connection is guarded by a lock
    single.close()
    redis_cluster.ensure_running()
    cluster: RedisCluster = redis_cluster.client()
    assert not wire.sends_directly(cluster)  # routed per slot by redis-py
    cluster.close()


def test_the_reply_is_raw_and_the_connection_goes_back_to_the_pool(server: RedisServer) -> None:
    client = redis.Redis.from_url(server.url)
    assert wire.send(client, wire.pack(("SET", "k", 42))) == b"OK"
    assert wire.send(client, wire.pack(("GET", "k"))) == b"42"
    pool = client.connection_pool
    assert len(pool._in_use_connections) == 0
    assert len(pool._available_connections) == 1


def test_an_error_reply_raises_and_leaves_the_connection_usable(server: RedisServer) -> None:
    client = redis.Redis.from_url(server.url)
    with pytest.raises(redis.exceptions.NoScriptError):
        wire.send(client, wire.pack(("EVALSHA", "0" * 40, 0)))
    with pytest.raises(redis.ResponseError, match="wrong number of arguments"):
        wire.send(client, wire.pack(("GET",)))
    assert wire.send(client, wire.pack(("PING",))) == b"PONG"
    assert len(client.connection_pool._available_connections) == 1


class Counted(Connection):
    """Counts the BLPOPs it writes (not its handshake's commands): the attempts of one send."""

    writes = 0

    def send_packed_command(self, command: bytes | list[bytes], check_health: bool = True) -> None:
        chunks = [command] if isinstance(command, bytes) else command
        if any(b"BLPOP" in chunk for chunk in chunks):
            Counted.writes += 1
        super().send_packed_command(command, check_health)


def attempts_at_a_hung_command(server: RedisServer, retries: int) -> int:
    """How many times a command Redis never answers is written before the error."""
    client = redis.Redis.from_url(
        server.url, socket_timeout=0.3, retry=Retry(NoBackoff(), retries), connection_class=Counted
    )
    Counted.writes = 0
    with pytest.raises(redis.TimeoutError):  # BLPOP ... 0 blocks for ever: times out at any speed
        wire.send(client, wire.pack(("BLPOP", "nothing-ever", 0)))
    attempts = Counted.writes
    assert wire.send(client, wire.pack(("PING",))) == b"PONG"  # the hung connection was dropped
    client.close()
    return attempts


def test_without_retries_a_timed_out_check_is_not_sent_again(server: RedisServer) -> None:
    # The engine's own clients: a check sent twice could be counted twice.
    assert attempts_at_a_hung_command(server, 0) == 1


def test_with_retries_the_client_s_policy_applies(server: RedisServer) -> None:
    # A django-redis cache's client with retries configured: as with execute_command.
    assert attempts_at_a_hung_command(server, 1) == 2


def test_an_engine_checks_the_same_either_way(server: RedisServer) -> None:
    limits = [Limit("api", rate) for rate in parse_rates("3/h")]
    verdicts = []
    for direct in (True, False):
        client = redis.Redis.from_url(server.url)
        engine = Engine(client, keys=KeySpace(prefix=f"w{direct}"))
        engine._direct = direct
        checks = [Check(Identity("ip", "192.0.2.1"), limits)]
        verdicts.append([engine.check(checks).allowed for _ in range(4)])
    assert verdicts == [[True, True, True, False]] * 2


# --------------------------------------------------------------------------- asyncio


def test_an_asyncio_client_sends_directly_and_a_cluster_does_not(
    server: RedisServer, redis_cluster: RedisClusterHarness
) -> None:
    assert wire.sends_directly(redis.asyncio.Redis.from_url(server.url))
    # Its one connection is made on first use, and guarded by a lock: not ours to bypass.
    assert not wire.sends_directly(
        redis.asyncio.Redis.from_url(server.url, single_connection_client=True)
    )
    host, port = redis_cluster.nodes[0]
    assert not wire.sends_directly(AsyncRedisCluster(host=host, port=port))


def test_asend_answers_raises_and_gives_the_connection_back(server: RedisServer) -> None:
    async def run() -> None:
        client = redis.asyncio.Redis.from_url(server.url)
        assert await wire.asend(client, wire.pack(("SET", "k", 7))) == b"OK"
        assert await wire.asend(client, wire.pack(("GET", "k"))) == b"7"
        with pytest.raises(redis.exceptions.NoScriptError):
            await wire.asend(client, wire.pack(("EVALSHA", "0" * 40, 0)))
        assert await wire.asend(client, wire.pack(("PING",))) == b"PONG"
        pool = client.connection_pool
        assert len(pool._in_use_connections) == 0
        await client.aclose()

    asyncio.run(run())


class ACounted(AsyncConnection):
    """:class:`Counted` for asyncio connections."""

    writes = 0

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        chunks = [command] if isinstance(command, bytes) else command
        if any(b"BLPOP" in chunk for chunk in chunks):
            ACounted.writes += 1
        await super().send_packed_command(command, check_health)


@pytest.mark.parametrize("retries", [0, 1])
def test_asend_keeps_the_client_s_retry_policy(server: RedisServer, retries: int) -> None:
    async def run() -> int:
        client = redis.asyncio.Redis.from_url(
            server.url,
            socket_timeout=0.3,
            retry=AsyncRetry(NoBackoff(), retries),
            connection_class=ACounted,
        )
        ACounted.writes = 0
        try:
            with pytest.raises(redis.TimeoutError):
                await wire.asend(client, wire.pack(("BLPOP", "nothing-ever", 0)))
            attempts = ACounted.writes
            assert await wire.asend(client, wire.pack(("PING",))) == b"PONG"
        finally:
            await client.aclose()
        return attempts

    assert asyncio.run(run()) == 1 + retries


def test_acheck_decides_the_same_either_way(server: RedisServer) -> None:
    limits = [Limit("api", rate) for rate in parse_rates("3/h")]
    checks = [Check(Identity("ip", "192.0.2.2"), limits)]

    async def run(direct: bool) -> list[bool]:
        aclient = redis.asyncio.Redis.from_url(server.url)
        engine = Engine(
            redis.Redis.from_url(server.url),
            keys=KeySpace(prefix=f"aw{direct}"),
            async_client=lambda: aclient,
        )
        sent: list[bytes] = []
        real = wire.asend

        async def spy(client: Any, packed: bytes) -> Any:
            sent.append(packed)
            return await real(client, packed)

        with (
            mock.patch.object(wire, "asend", spy if direct else _never),
            mock.patch.object(wire, "sends_directly", lambda client: direct),
        ):
            verdicts = [(await engine.acheck(checks)).allowed for _ in range(4)]
        await aclient.aclose()
        assert bool(sent) is direct
        return verdicts

    assert asyncio.run(run(True)) == asyncio.run(run(False)) == [True, True, True, False]


async def _never(*_: Any) -> Any:
    raise AssertionError("asend used by a client that must not send directly")
