"""The check's short way to Redis for asyncio clients (engine/awire.py) keeps what
execute_command promises, as the sync one does (test_wire.py)."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Awaitable, Callable
from typing import Any
from unittest import mock

import pytest
import redis
import redis.asyncio
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.connection import Connection as AsyncConnection
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff

from devtools.redis_harness import RedisClusterHarness, RedisServer
from django_ratelimits.engine import Check, Engine, Identity, KeySpace, Limit, awire, wire
from django_ratelimits.rates import parse_rates


@pytest.fixture
def server(clean_standalone: RedisServer) -> RedisServer:
    return clean_standalone


Way = Callable[[redis.asyncio.Redis], awire.AOwn | awire.APooled]
LINES: dict[str, Way] = {
    "own": lambda client: awire.AOwn(client.connection_pool),
    "pooled": awire.APooled,
}
each_way = pytest.mark.parametrize("way", list(LINES.values()), ids=list(LINES))


def run(test: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(test())  # type: ignore[arg-type]


OwnTest = Callable[[redis.asyncio.Redis, awire.AOwn], Awaitable[None]]


def with_own(server: RedisServer, test: OwnTest, **options: Any) -> None:
    """Runs ``test`` with a new asyncio client of ``server`` (closed after) and an
    :class:`~django_ratelimits.engine.awire.AOwn` of its pool."""

    async def go() -> None:
        client = redis.asyncio.Redis.from_url(server.url, **options)
        try:
            await test(client, awire.AOwn(client.connection_pool))
        finally:
            await client.aclose()

    asyncio.run(go())


def test_a_plain_asyncio_pool_s_client_gets_connections_kept_by_the_engine(
    server: RedisServer, redis_cluster: RedisClusterHarness
) -> None:
    assert isinstance(awire.aline(redis.asyncio.Redis.from_url(server.url)), awire.AOwn)
    blocking = redis.asyncio.Redis(
        connection_pool=redis.asyncio.BlockingConnectionPool.from_url(server.url)
    )
    assert isinstance(awire.aline(blocking), awire.APooled)
    # Its one connection is made on first use, and guarded by a lock: not ours to bypass.
    single = redis.asyncio.Redis.from_url(server.url, single_connection_client=True)
    assert awire.aline(single) is None
    host, port = redis_cluster.nodes[0]
    assert awire.aline(AsyncRedisCluster(host=host, port=port)) is None
    assert awire.aline(redis.Redis.from_url(server.url)) is None  # a sync client


@each_way
def test_answers_raises_and_keeps_the_connection_usable(server: RedisServer, way: Way) -> None:
    async def test() -> None:
        client = redis.asyncio.Redis.from_url(server.url)
        line = way(client)
        assert await line.send(wire.pack(("SET", "k", 7))) == b"OK"
        assert await line.send(wire.pack(("GET", "k"))) == b"7"
        before = await line.send(wire.pack(("CLIENT", "ID")))
        with pytest.raises(redis.exceptions.NoScriptError):
            await line.send(wire.pack(("EVALSHA", "0" * 40, 0)))
        assert await line.send(wire.pack(("PING",))) == b"PONG"
        assert await line.send(wire.pack(("CLIENT", "ID"))) == before  # kept after an error
        await client.aclose()

    run(test)


def test_pooled_gives_the_connection_back_and_own_keeps_it_counted(server: RedisServer) -> None:
    async def test() -> None:
        client = redis.asyncio.Redis.from_url(server.url)
        pool = client.connection_pool
        await awire.APooled(client).send(wire.pack(("PING",)))
        assert len(pool._in_use_connections) == 0
        own = awire.AOwn(pool)
        ids = {await own.send(wire.pack(("CLIENT", "ID"))) for _ in range(5)}
        assert len(ids) == 1
        # Taken from the pool once, still counted in use: max_connections bounds it.
        assert len(pool._in_use_connections) == 1
        await client.aclose()

    run(test)


def test_own_reconnects_a_connection_redis_closed_while_idle(server: RedisServer) -> None:
    async def test(client: redis.asyncio.Redis, own: awire.AOwn) -> None:
        first = await own.send(wire.pack(("CLIENT", "ID")))
        with server.client() as staff:
            assert staff.client_kill_filter(_id=first) == 1
        [kept] = own._idle
        for _ in range(3000):  # until the event loop has read the close, at any speed
            if kept._reader is not None and kept._reader.at_eof():
                break
            await asyncio.sleep(0.01)
        assert await own.send(wire.pack(("INCR", "once"))) == 1  # sent once, answered
        assert await own.send(wire.pack(("CLIENT", "ID"))) != first
        assert await client.get("once") == b"1"

    with_own(server, test)


async def a_restart_the_event_loop_has_not_seen(server: RedisServer) -> None:
    """Redis restarts while the event loop is kept from polling (a task busy on the
    loop, nothing awaited): its close waits unread in the socket. The next check is
    answered by the new Redis, once, and does not fail open (plain here, TLS in
    test_tls.py)."""
    aclient = redis.asyncio.Redis.from_url(  # as the engine's own: no retry to hide it
        server.url, socket_timeout=5, retry=AsyncRetry(NoBackoff(), 0)
    )
    engine = Engine(
        redis.Redis.from_url(server.url), keys=KeySpace(prefix="re"), async_client=lambda: aclient
    )
    who = [Check(Identity("ip", "192.0.2.4"), [Limit("api", parse_rates("100/h")[0])])]
    try:
        assert [r.remaining for r in (await engine.acheck(who)).results] == [99]
        server.stop()  # and started again with no await in between: the loop reads nothing
        server.start()
        assert [r.remaining for r in (await engine.acheck(who)).results] == [99]  # new, empty
        assert [r.remaining for r in (await engine.acheck(who)).results] == [98]  # once
        assert isinstance(engine._alines[aclient], awire.AOwn)
    finally:
        await aclient.aclose()


def test_the_first_acheck_after_a_restart_the_loop_has_not_seen_is_answered(
    server: RedisServer,
) -> None:
    # The sync twin polls its socket too (test_wire.py). An idle loop reads the close
    # at once (test_own_reconnects_a_connection_redis_closed_while_idle).
    run(lambda: a_restart_the_event_loop_has_not_seen(server))


async def until_buffered(connection: Any) -> None:
    """Waits until the event loop has read something into ``connection``'s stream (at
    any speed: bounded only by a minute)."""
    for _ in range(6000):
        if connection._reader is not None and connection._reader._buffer:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("nothing reached the connection's stream")


async def a_stray_reply_is_never_read(client: redis.asyncio.Redis, own: awire.AOwn) -> None:
    """A reply left on an idle connection (what an interrupted command leaves) is never
    taken by the next command for its own (plain here, TLS in test_tls.py)."""
    await own.send(wire.pack(("PING",)))
    [kept] = own._idle
    await kept.send_packed_command([wire.pack(("ECHO", "stray"))])
    await until_buffered(kept)
    assert await own.send(wire.pack(("ECHO", "mine"))) == b"mine"
    assert await own.send(wire.pack(("ECHO", "again"))) == b"again"


def test_own_never_reads_a_reply_left_on_an_idle_connection(server: RedisServer) -> None:
    # The sync twin is in test_wire.py. Here the socket is never asked: the event loop
    # reads whatever arrives into the connection's stream, where a reply nobody read
    # waits for the next command to take it.
    with_own(server, a_stray_reply_is_never_read)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    writer.close()


def test_own_reconnects_a_connection_reset_while_idle(server: RedisServer) -> None:
    # A connection reset (a proxy or a load balancer dropping it) leaves the reader
    # an exception, not an end: it too is connected anew before the next command.
    async def test() -> None:
        sides: list[asyncio.StreamWriter] = []
        pipes: list[asyncio.Task[None]] = []  # kept, so that they are not collected

        async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            up_reader, up_writer = await asyncio.open_connection(server.host, server.port)
            sides.append(writer)
            pipes.append(asyncio.create_task(_pipe(reader, up_writer)))
            pipes.append(asyncio.create_task(_pipe(up_reader, writer)))

        proxy = await asyncio.start_server(relay, "127.0.0.1", 0)
        client = redis.asyncio.Redis(  # as the engine's own: no retries to hide a failure
            host="127.0.0.1",
            port=proxy.sockets[0].getsockname()[1],
            retry=AsyncRetry(NoBackoff(), 0),
        )
        own = awire.AOwn(client.connection_pool)
        assert await own.send(wire.pack(("PING",))) == b"PONG"
        side = sides[0].get_extra_info("socket")
        side.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sides[0].transport.abort()  # with no linger: a reset
        [kept] = own._idle
        for _ in range(3000):  # until the event loop has read the reset, at any speed
            if kept._reader is None or kept._reader.exception() is not None:
                break
            await asyncio.sleep(0.01)
        assert kept._reader is not None and isinstance(kept._reader.exception(), OSError)
        assert await own.send(wire.pack(("ECHO", "after"))) == b"after"
        await client.aclose()
        proxy.close()

    run(test)


def test_own_drops_a_connection_whose_task_was_cancelled_waiting(server: RedisServer) -> None:
    async def test(client: redis.asyncio.Redis, own: awire.AOwn) -> None:
        await own.send(wire.pack(("PING",)))
        waiting = asyncio.ensure_future(own.send(wire.pack(("BLPOP", "later", 0))))
        while own._idle:  # until the BLPOP has its connection
            await asyncio.sleep(0.01)
        with server.client() as other:
            while not any(c.get("cmd") == "blpop" for c in other.client_list()):
                await asyncio.sleep(0.01)  # until Redis holds the BLPOP, at any speed
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            other.rpush("later", "late")  # the BLPOP's answer, if its connection lived on
        assert await own.send(wire.pack(("ECHO", "mine"))) == b"mine"

    with_own(server, test)


class Interrupted(BaseException):
    """Raised into a task between its command and the reply, outside redis-py's code."""


class AInterruptible(AsyncConnection):
    """Raises :class:`Interrupted` instead of reading the reply, once asked to."""

    interrupt = False

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        if AInterruptible.interrupt:
            AInterruptible.interrupt = False
            raise Interrupted
        return await super().read_response(*args, **kwargs)


def test_own_drops_a_connection_whose_reply_was_never_read(server: RedisServer) -> None:
    async def test(client: redis.asyncio.Redis, own: awire.AOwn) -> None:
        await own.send(wire.pack(("PING",)))  # connected: the handshake's replies are read
        AInterruptible.interrupt = True
        with pytest.raises(Interrupted):
            await own.send(wire.pack(("BLPOP", "later", 0)))  # answered once "later" has one
        with server.client() as other:
            other.rpush("later", "late")  # the BLPOP's answer, if its connection lived on
        assert await own.send(wire.pack(("ECHO", "mine"))) == b"mine"

    with_own(server, test, connection_class=AInterruptible)


def test_own_never_lends_one_connection_to_two_tasks(server: RedisServer) -> None:
    async def test(client: redis.asyncio.Redis, own: awire.AOwn) -> None:

        async def echo(n: int) -> tuple[bytes, Any]:
            mine = str(n).encode()
            return mine, await own.send(wire.pack(("ECHO", mine)))

        assert all(mine == reply for mine, reply in await asyncio.gather(*map(echo, range(50))))
        assert 1 <= len(own._idle) <= 50  # never more than were in use at once

    with_own(server, test)


class ACounted(AsyncConnection):
    """Counts the BLPOPs it writes: the attempts of one send."""

    writes = 0

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        chunks = [command] if isinstance(command, bytes) else command
        if any(b"BLPOP" in chunk for chunk in chunks):
            ACounted.writes += 1
        await super().send_packed_command(command, check_health)


@each_way
@pytest.mark.parametrize("retries", [0, 1])
def test_the_client_s_retry_policy_applies(server: RedisServer, retries: int, way: Way) -> None:
    async def test() -> int:
        client = redis.asyncio.Redis.from_url(
            server.url,
            socket_timeout=0.3,
            retry=AsyncRetry(NoBackoff(), retries),
            connection_class=ACounted,
        )
        line = way(client)
        ACounted.writes = 0
        try:
            with pytest.raises(redis.TimeoutError):
                await line.send(wire.pack(("BLPOP", "hung", 0)))  # times out at any speed
            attempts = ACounted.writes
            with server.client() as other:
                other.rpush("hung", *["late"] * attempts)  # the timed-out BLPOPs' answers
            # The hung connection was dropped: its BLPOP's late answer is read by nobody.
            assert await line.send(wire.pack(("PING",))) == b"PONG"
        finally:
            await client.aclose()
        return attempts

    assert run(test) == 1 + retries


def test_acheck_decides_the_same_every_way(server: RedisServer) -> None:
    limits = [Limit("api", rate) for rate in parse_rates("3/h")]
    checks = [Check(Identity("ip", "192.0.2.2"), limits)]

    async def test(way: str | None) -> list[bool]:
        aclient = redis.asyncio.Redis.from_url(server.url)
        engine = Engine(
            redis.Redis.from_url(server.url),
            keys=KeySpace(prefix=f"aw{way}"),
            async_client=lambda: aclient,
        )
        with mock.patch.object(awire, "aline", lambda client: LINES[way](client) if way else None):
            verdicts = [(await engine.acheck(checks)).allowed for _ in range(4)]
        line = engine._alines[aclient]
        assert line is None if way is None else isinstance(line, type(LINES[way](aclient)))
        await aclient.aclose()
        return verdicts

    assert [asyncio.run(test(way)) for way in ("own", "pooled", None)] == [
        [True, True, True, False]
    ] * 3


def test_an_engine_gives_each_asyncio_client_its_own_line(server: RedisServer) -> None:
    engine = Engine(redis.Redis.from_url(server.url), keys=KeySpace(prefix="awl"))
    checks = [Check(Identity("ip", "192.0.2.3"), [Limit("api", parse_rates("5/h")[0])])]

    async def test() -> awire.AOwn | awire.APooled | None:
        aclient = redis.asyncio.Redis.from_url(server.url)  # one per event loop, as in use
        engine._async_client = lambda: aclient
        assert (await engine.acheck(checks)).allowed
        line = engine._alines[aclient]
        await aclient.aclose()
        return line

    first, second = run(test), run(test)
    assert isinstance(first, awire.AOwn) and isinstance(second, awire.AOwn)
    assert first is not second  # asyncio connections belong to their loop
