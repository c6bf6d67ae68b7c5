"""The check's short way to Redis (engine/wire.py) keeps what execute_command promises."""

from __future__ import annotations

import os
import select
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.connection import Connection
from redis.retry import Retry

from devtools.redis_harness import RedisClusterHarness, RedisServer
from django_ratelimits.engine import Check, Engine, Identity, KeySpace, Limit, wire
from django_ratelimits.rates import parse_rates


@pytest.fixture
def server(clean_standalone: RedisServer) -> RedisServer:
    return clean_standalone


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


def test_a_plain_pool_s_client_gets_connections_of_the_engine_s_own(
    server: RedisServer, redis_cluster: RedisClusterHarness
) -> None:
    assert isinstance(wire.line(redis.Redis.from_url(server.url)), wire.Own)
    # Waiters on a blocking pool need its connections back.
    blocking = redis.Redis(connection_pool=redis.BlockingConnectionPool.from_url(server.url))
    assert isinstance(wire.line(blocking), wire.Pooled)
    single = redis.Redis.from_url(server.url, single_connection_client=True)
    assert wire.line(single) is None  # its one connection is guarded by a lock
    single.close()
    redis_cluster.ensure_running()
    cluster: RedisCluster = redis_cluster.client()
    assert wire.line(cluster) is None  # routed per slot by redis-py
    cluster.close()


Way = Callable[[redis.Redis], wire.Own | wire.Pooled]
WAYS: dict[str, Way] = {
    "own": lambda client: wire.Own(client.connection_pool),
    "pooled": lambda client: wire.Pooled(client.connection_pool),
}


@pytest.fixture(params=sorted(WAYS))
def way(request: pytest.FixtureRequest) -> Way:
    return WAYS[request.param]


def test_the_reply_is_raw(server: RedisServer, way: Any) -> None:
    line = way(redis.Redis.from_url(server.url))
    assert line.send(wire.pack(("SET", "k", 42))) == b"OK"
    assert line.send(wire.pack(("GET", "k"))) == b"42"


def test_pooled_gives_the_connection_back_to_the_pool(server: RedisServer) -> None:
    client = redis.Redis.from_url(server.url)
    wire.Pooled(client.connection_pool).send(wire.pack(("PING",)))
    pool = client.connection_pool
    assert len(pool._in_use_connections) == 0
    assert len(pool._available_connections) == 1


def test_own_keeps_one_connection_for_commands_sent_one_after_another(
    server: RedisServer,
) -> None:
    client = redis.Redis.from_url(server.url)
    line = wire.Own(client.connection_pool)
    ids = {line.send(wire.pack(("CLIENT", "ID"))) for _ in range(5)}
    assert len(ids) == 1
    assert len(line._idle) == 1
    assert client.connection_pool._created_connections == 0  # not the pool's


def test_own_leaves_a_bounded_pool_to_its_other_users(server: RedisServer) -> None:
    # A django-redis cache sized to its threads: the engine's connections are not
    # taken from it, so the cache never finds it full because of them.
    client = redis.Redis.from_url(server.url, max_connections=1)
    line = wire.Own(client.connection_pool)
    assert line.send(wire.pack(("PING",))) == b"PONG"
    assert client.set("cache", "still works")


def test_own_makes_no_more_connections_than_the_pool_may_hold(server: RedisServer) -> None:
    client = redis.Redis.from_url(server.url, max_connections=1)
    line = wire.Own(client.connection_pool)
    line.send(wire.pack(("PING",)))
    [in_use] = line._idle  # as if another thread were sending on it
    line._idle.clear()
    assert line.send(wire.pack(("ECHO", "through the pool"))) == b"through the pool"
    assert (line._made, client.connection_pool._created_connections) == (1, 1)
    assert line._idle == []  # the pool's connection went back to the pool
    line._idle.append(in_use)


def test_a_pool_whose_credentials_may_rotate_is_checked_out_per_command(
    server: RedisServer,
) -> None:
    # redis-py re-authenticates a connection (streaming credentials) when it goes back.
    provider = redis.UsernamePasswordCredentialProvider()
    client = redis.Redis.from_url(server.url, credential_provider=provider)
    assert isinstance(wire.line(client), wire.Pooled)


def test_an_error_reply_raises_and_leaves_the_connection_usable(
    server: RedisServer, way: Any
) -> None:
    line = way(redis.Redis.from_url(server.url))
    before = line.send(wire.pack(("CLIENT", "ID")))
    with pytest.raises(redis.exceptions.NoScriptError):
        line.send(wire.pack(("EVALSHA", "0" * 40, 0)))
    with pytest.raises(redis.ResponseError, match="wrong number of arguments"):
        line.send(wire.pack(("GET",)))
    assert line.send(wire.pack(("PING",))) == b"PONG"
    # An error reply was read whole: the connection is kept, not made anew (a Redis
    # that refuses every write must not also see its clients reconnect).
    assert line.send(wire.pack(("CLIENT", "ID"))) == before


def _until_readable(kept: Any) -> None:
    """Waits until Redis' reply, or its closing, has reached ``kept``'s socket."""
    assert select.select([kept.sock], [], [], 30)[0]


def test_own_never_reads_a_reply_left_on_an_idle_connection(server: RedisServer) -> None:
    line = wire.Own(redis.Redis.from_url(server.url).connection_pool)
    line.send(wire.pack(("PING",)))
    [kept] = line._idle
    # A reply nobody read (what an interrupted command leaves; see the next test).
    kept.connection.send_packed_command([wire.pack(("ECHO", "stray"))])
    _until_readable(kept)  # however long it takes to arrive
    assert line.send(wire.pack(("ECHO", "mine"))) == b"mine"
    assert line.send(wire.pack(("ECHO", "again"))) == b"again"


class Interrupted(BaseException):
    """Raised into a thread while it waits for a reply (as gevent's Timeout is)."""


class Interruptible(Connection):
    """Raises :class:`Interrupted` instead of reading the reply, once asked to."""

    interrupt = False

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        if Interruptible.interrupt:
            Interruptible.interrupt = False
            raise Interrupted
        return super().read_response(*args, **kwargs)


def test_own_drops_a_connection_whose_reply_was_never_read(server: RedisServer) -> None:
    client = redis.Redis.from_url(server.url, connection_class=Interruptible)
    line = wire.Own(client.connection_pool)
    line.send(wire.pack(("PING",)))  # connected: the handshake's replies are read
    Interruptible.interrupt = True
    with pytest.raises(Interrupted):
        line.send(wire.pack(("BLPOP", "later", 0)))  # answered only once "later" has an item
    with server.client() as other:
        late = threading.Timer(0.2, other.rpush, ("later", "late"))
        late.start()
        try:
            # On the BLPOP's connection this would wait for, and read, its answer.
            assert line.send(wire.pack(("ECHO", "mine"))) == b"mine"
        finally:
            late.join()


def test_own_reconnects_a_connection_redis_closed_while_idle(server: RedisServer) -> None:
    # A restart, or Redis' own `timeout`: the next check goes through all the same,
    # once (a command written to a closed socket could be counted or not).
    client = redis.Redis.from_url(server.url)
    line = wire.Own(client.connection_pool)
    first = line.send(wire.pack(("CLIENT", "ID")))
    with server.client() as staff:
        assert staff.client_kill_filter(_id=first) == 1
    _until_readable(line._idle[0])  # however long the close takes to arrive
    assert line.send(wire.pack(("INCR", "once"))) == 1
    assert line.send(wire.pack(("CLIENT", "ID"))) != first
    assert client.get("once") == b"1"


def test_own_makes_no_use_of_connections_made_before_a_fork(server: RedisServer) -> None:
    # gunicorn --preload: a worker must never write to its parent's socket.
    line = wire.Own(redis.Redis.from_url(server.url).connection_pool)
    parents = line.send(wire.pack(("CLIENT", "ID")))
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child: its own connection, its answer through the pipe
        try:
            os.write(write, str(line.send(wire.pack(("CLIENT", "ID")))).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as answer:
        childs = int(answer.read() or "0")
    os.waitpid(child, 0)
    assert childs not in (0, parents)
    assert line.send(wire.pack(("CLIENT", "ID"))) == parents  # the parent's is intact


def test_own_never_lends_one_connection_to_two_threads(server: RedisServer) -> None:
    client = redis.Redis.from_url(server.url)
    line = wire.Own(client.connection_pool)
    threads, each = 8, 200
    wrong: list[tuple[bytes, object]] = []

    def work(n: int) -> None:
        for i in range(each):
            mine = f"{n}-{i}".encode()
            reply = line.send(wire.pack(("ECHO", mine)))
            if reply != mine:
                wrong.append((mine, reply))

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(work, range(threads)))
    assert wrong == []
    assert 1 <= len(line._idle) <= threads  # never more than were in use at once


class Counted(Connection):
    """Counts the BLPOPs it writes (not its handshake's commands): the attempts of one send."""

    writes = 0

    def send_packed_command(self, command: bytes | list[bytes], check_health: bool = True) -> None:
        chunks = [command] if isinstance(command, bytes) else command
        if any(b"BLPOP" in chunk for chunk in chunks):
            Counted.writes += 1
        super().send_packed_command(command, check_health)


def attempts_at_a_hung_command(server: RedisServer, retries: int, way: Any) -> int:
    """How many times a command Redis never answers is written before the error."""
    client = redis.Redis.from_url(
        server.url, socket_timeout=0.3, retry=Retry(NoBackoff(), retries), connection_class=Counted
    )
    line = way(client)
    Counted.writes = 0
    with pytest.raises(redis.TimeoutError):  # BLPOP ... 0 blocks for ever: times out at any speed
        line.send(wire.pack(("BLPOP", "hung", 0)))
    attempts = Counted.writes
    with server.client() as other:
        other.rpush("hung", *["late"] * attempts)  # what the timed-out BLPOPs would read
    # The hung connection was dropped: its BLPOP's late answer is read by nobody.
    assert line.send(wire.pack(("PING",))) == b"PONG"
    client.close()
    return attempts


def test_without_retries_a_timed_out_check_is_not_sent_again(server: RedisServer, way: Any) -> None:
    # The engine's own clients: a check sent twice could be counted twice.
    assert attempts_at_a_hung_command(server, 0, way) == 1


def test_with_retries_the_client_s_policy_applies(server: RedisServer, way: Any) -> None:
    # A django-redis cache's client with retries configured: as with execute_command.
    assert attempts_at_a_hung_command(server, 1, way) == 2


def test_an_engine_checks_the_same_either_way(server: RedisServer) -> None:
    limits = [Limit("api", rate) for rate in parse_rates("3/h")]
    verdicts = []
    for way in ("own", "pooled", None):
        client = redis.Redis.from_url(server.url)
        engine = Engine(client, keys=KeySpace(prefix=f"w{way}"))
        assert isinstance(engine._line, wire.Own)
        engine._line = WAYS[way](client) if way is not None else None
        checks = [Check(Identity("ip", "192.0.2.1"), limits)]
        verdicts.append([engine.check(checks).allowed for _ in range(4)])
    assert verdicts == [[True, True, True, False]] * 3
