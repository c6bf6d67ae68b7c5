"""Real servers: gunicorn (two sync worker processes) and uvicorn, against the harness's Redis.

Both serve ``tests.urls`` with ``tests/server_settings.py`` on free loopback
ports, from one SQLite file that a subprocess migrates and fills with three
policies before they start:

* ``api``: ``^/api/hello``, sliding log, 10/m per address, except 127.0.0.2;
* ``watch``: ``^/api/other``, shadow mode, 2/m;
* ``admin``: ``^/admin/``, 1000/m, fails closed.

Requests come from this process over real sockets (``http.client``), some
from 127.0.0.2, which Linux routes to loopback like 127.0.0.1. Every server is
killed with its whole process group when the module ends.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from functools import partial

import pytest

from devtools.redis_harness import RedisServer, reserved_port
from tests.load.live import (
    SLOWDOWN,
    Reply,
    Site,
    access_statuses,
    assert_no_server_error,
    gunicorn,
    new_source,
    prepare,
    serve,
    uvicorn,
)

pytestmark = pytest.mark.slow

# Seconds a request may take while Redis is down or hung, on a quiet machine; widened by
# SLOWDOWN times the slowest healthy request of the same run (see tests.load.live).
OUTAGE_BOUND = 2.0
LIMIT = 10
RUNS, CLIENTS = 20, 16  # of the concurrency test

POLICIES = [
    {
        "name": "api",
        "rates": f"{LIMIT}/m",
        "algorithm": "sliding_log",
        "path": r"^/api/hello",
        "allow_cidrs": "127.0.0.2",
    },
    {
        "name": "watch",
        "rates": "2/m",
        "algorithm": "fixed_window",
        "path": r"^/api/other",
        "mode": "shadow",
    },
    {"name": "admin", "rates": "1000/m", "path": r"^/admin/", "fail_closed": True},
]


@pytest.fixture(scope="module")
def servers(
    redis_standalone: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Site]]:
    """gunicorn and uvicorn, serving one database and one Redis."""
    if not redis_standalone.is_running():
        redis_standalone.start()
    workdir = tmp_path_factory.mktemp("servers")
    # Shared by tests that flush Redis between them and expect the next to start
    # afresh at once: a worker's cached denials would outlive a flush by up to
    # POLICY_REFRESH (docs/flood.md). The cache has servers of its own:
    # test_servers_deny_cache.py.
    env = prepare(workdir, redis_standalone.url, POLICIES, RATELIMITS_SERVER_DENIAL_CACHE="0")
    wsgi_port, asgi_port = reserved_port(), reserved_port()
    with ExitStack() as stack:
        sites = {
            "gunicorn": stack.enter_context(
                serve("gunicorn", gunicorn(wsgi_port, workdir), env, workdir, wsgi_port, workers=2)
            ),
            "uvicorn": stack.enter_context(
                serve("uvicorn", uvicorn(asgi_port), env, workdir, asgi_port)
            ),
        }
        yield sites
    # No request ever failed with a 500, whatever Redis did.
    assert_no_server_error(*sites.values())
    statuses = access_statuses(workdir)
    assert statuses and "500" not in statuses


@pytest.fixture
def redis_server(redis_standalone: RedisServer, servers: dict[str, Site]) -> Iterator[RedisServer]:
    """The servers' Redis, running and empty; running again after the test."""
    if not redis_standalone.is_running():
        redis_standalone.start()
    with redis_standalone.client() as client:
        client.flushall()
    yield redis_standalone
    if not redis_standalone.is_running():
        redis_standalone.start()


@pytest.fixture(params=["gunicorn", "uvicorn"])
def site(
    request: pytest.FixtureRequest, servers: dict[str, Site], redis_server: RedisServer
) -> Site:
    return servers[request.param]


# --------------------------------------------------------------------------- limits


def _check_denial(reply: Reply) -> None:
    """A 429 whose Retry-After, RateLimit fields and problem body agree."""
    assert reply.status == 429
    retry = int(reply.headers["retry-after"])
    assert 1 <= retry <= 60
    assert reply.headers["ratelimit-policy"] == f'"api";q={LIMIT};w=60'
    assert reply.headers["ratelimit"] == f'"api";r=0;t={retry}'
    assert json.loads(reply.body)["status"] == 429


def test_concurrent_clients_of_two_gunicorn_workers_get_exactly_the_limit(
    servers: dict[str, Site], redis_server: RedisServer
) -> None:
    """16 clients at once send twice the limit, 20 times over (a new address each time)."""
    gunicorn = servers["gunicorn"]
    workers: set[str] = set()
    with ThreadPoolExecutor(CLIENTS) as pool:
        for _ in range(RUNS):
            ask = partial(gunicorn.get, source=new_source())
            replies = list(pool.map(ask, ["/api/hello"] * (2 * LIMIT)))
            assert sorted(r.status for r in replies) == [200] * LIMIT + [429] * LIMIT
            # Each allowed request saw its own place in the quota: no two counted as one.
            assert sorted(r.remaining for r in replies if r.status == 200) == list(range(LIMIT))
            for reply in replies:
                if reply.status == 429:
                    _check_denial(reply)
            workers |= {r.worker for r in replies}
    assert len(workers) == 2  # both workers served


def test_the_boundary_is_exact_and_shared_by_both_servers(
    servers: dict[str, Site], redis_server: RedisServer
) -> None:
    asgi, wsgi = servers["uvicorn"], servers["gunicorn"]
    half = LIMIT // 2
    allowed = [asgi.get("/api/hello") for _ in range(half)]
    allowed += [wsgi.get("/api/hello") for _ in range(LIMIT - half)]
    assert [r.status for r in allowed] == [200] * LIMIT
    assert [r.remaining for r in allowed] == list(range(LIMIT - 1, -1, -1))
    for server in (asgi, wsgi):
        _check_denial(server.get("/api/hello"))


def test_shadow_mode_counts_but_never_blocks(site: Site, redis_server: RedisServer) -> None:
    replies = [site.get("/api/other") for _ in range(6)]
    assert [r.status for r in replies] == [200] * 6
    assert not any("ratelimit" in r.headers for r in replies)  # shadow policies stay unseen
    with redis_server.client() as client:
        assert client.dbsize() > 0  # but they were counted


def test_an_exempt_network_is_never_limited(site: Site, redis_server: RedisServer) -> None:
    exempt = [site.get("/api/hello", source="127.0.0.2") for _ in range(LIMIT + 5)]
    assert [r.status for r in exempt] == [200] * (LIMIT + 5)
    assert not any("ratelimit" in r.headers for r in exempt)
    others = [site.get("/api/hello") for _ in range(LIMIT + 1)]
    assert [r.status for r in others] == [200] * LIMIT + [429]


# --------------------------------------------------------------------------- Redis failures


def _during_outage(servers: dict[str, Site], rounds: int) -> dict[str, list[Reply]]:
    """Fail-open and fail-closed requests to both servers; checks every answer."""
    replies: dict[str, list[Reply]] = {name: [] for name in servers}
    for _ in range(rounds):
        for server in servers.values():
            open_ = server.get("/api/hello")
            closed = server.get("/admin/login/")
            assert open_.status == 200, (server.name, open_)
            assert "ratelimit" not in open_.headers  # nothing decided, nothing claimed
            assert closed.status == 503, (server.name, closed)
            assert int(closed.headers["retry-after"]) >= 1
            replies[server.name] += [open_, closed]
        time.sleep(0.1)  # spread over the breaker's cooldown, so trials happen too
    return replies


def _recovered(servers: dict[str, Site]) -> None:
    """Wait until Redis decides again in every server process.

    Each process has its own circuit breaker, closed only by a request that
    process serves, so gunicorn gets concurrent requests until both of its
    workers have answered with a decision.
    """
    for server in servers.values():
        processes = 2 if server.name == "gunicorn" else 1
        deadline = time.monotonic() + 15
        deciding: set[str] = set()
        with ThreadPoolExecutor(4) as pool:
            while len(deciding) < processes:
                assert time.monotonic() < deadline, f"{server.name} did not recover: {deciding}"
                for reply in pool.map(Site.get, [server] * 4, ["/admin/login/"] * 4):
                    assert reply.status in (200, 503), reply
                    if "ratelimit" in reply.headers:
                        deciding.add(reply.headers["x-worker-pid"])
                time.sleep(0.05)


def _healthy(servers: dict[str, Site]) -> dict[str, float]:
    """Each server's slowest answer to the outage's requests while Redis is up."""
    slowest = {}
    for server in servers.values():
        replies = [server.get(path) for path in ("/api/hello", "/admin/login/") * 5]
        assert all(r.status in (200, 429) for r in replies), (server.name, replies)
        slowest[server.name] = max(r.seconds for r in replies)
    return slowest


def _report(
    capsys: pytest.CaptureFixture[str],
    what: str,
    replies: dict[str, list[Reply]],
    healthy: dict[str, float],
) -> None:
    """Print each server's latencies during the outage; assert the bound."""
    lines = []
    for name, answered in replies.items():
        seconds = sorted(r.seconds for r in answered)
        lines.append(
            f"{name} {len(seconds)} requests, max {seconds[-1] * 1000:.0f} ms, "
            f"median {seconds[len(seconds) // 2] * 1000:.1f} ms"
        )
        bound = OUTAGE_BOUND + SLOWDOWN * healthy[name]
        assert seconds[-1] < bound, (name, seconds[-5:], bound)
    with capsys.disabled():
        print(f"\n{what}: {'; '.join(lines)}")


def test_redis_stopped_fails_open_and_closed_fast_then_recovers(
    servers: dict[str, Site], redis_server: RedisServer, capsys: pytest.CaptureFixture[str]
) -> None:
    healthy = _healthy(servers)
    redis_server.stop()
    try:
        replies = _during_outage(servers, rounds=15)
    finally:
        redis_server.start()
    _report(capsys, "Redis stopped", replies, healthy)
    _recovered(servers)
    _limit_holds(servers, redis_server)


def test_redis_hung_costs_at_most_the_socket_timeout(
    servers: dict[str, Site], redis_server: RedisServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert redis_server.process is not None
    healthy = _healthy(servers)
    redis_server.process.send_signal(signal.SIGSTOP)  # connections open, nothing answers
    try:
        replies = _during_outage(servers, rounds=15)
    finally:
        redis_server.process.send_signal(signal.SIGCONT)
    _report(capsys, "Redis hung (SIGSTOP)", replies, healthy)
    _recovered(servers)
    _limit_holds(servers, redis_server)


def _limit_holds(servers: dict[str, Site], redis_server: RedisServer) -> None:
    for server in servers.values():
        with redis_server.client() as client:
            client.flushall()
        replies = [server.get("/api/hello") for _ in range(LIMIT + 1)]
        assert [r.status for r in replies] == [200] * LIMIT + [429], server.name
