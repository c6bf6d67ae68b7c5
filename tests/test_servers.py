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

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.redis_harness import RedisServer, free_port

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT = 30.0  # seconds for a server to answer its first request
REQUEST_TIMEOUT = 10.0  # seconds for any one request, so a hang fails instead of stalling
OUTAGE_BOUND = 2.0  # seconds a request may take while Redis is down or hung
LIMIT = 10

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


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]  # lower-case names
    body: bytes
    seconds: float

    @property
    def remaining(self) -> int:
        """``r`` of the ``RateLimit`` header field."""
        found = re.search(r";r=(\d+);", self.headers["ratelimit"])
        assert found, self.headers["ratelimit"]
        return int(found.group(1))


@dataclass(frozen=True)
class Site:
    name: str
    port: int
    log: Path

    def get(self, path: str, *, source: str = "127.0.0.1") -> Reply:
        connection = http.client.HTTPConnection(
            "127.0.0.1", self.port, timeout=REQUEST_TIMEOUT, source_address=(source, 0)
        )
        started = time.monotonic()
        try:
            connection.request("GET", path, headers={"Accept": "application/json"})
            response = connection.getresponse()
            body = response.read()
        finally:
            connection.close()
        headers = {name.lower(): value for name, value in response.getheaders()}
        return Reply(response.status, headers, body, time.monotonic() - started)


# --------------------------------------------------------------------------- servers


def _django(env: dict[str, str], *args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "django", *args],
        env=env,
        cwd=ROOT,
        check=True,
        timeout=120,
        capture_output=True,
    )


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's process group, then SIGKILL to whatever is left."""
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with suppress(subprocess.TimeoutExpired):
        process.wait(10)
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


@contextmanager
def _serve(
    name: str, argv: list[str], env: dict[str, str], workdir: Path, port: int
) -> Iterator[Site]:
    site = Site(name, port, workdir / f"{name}.log")
    with open(site.log, "wb") as output:
        process = subprocess.Popen(
            argv, env=env, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        _wait_until_serving(site, process)
        yield site
    finally:
        _kill_group(process)


def _wait_until_serving(site: Site, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"{site.name} exited with {process.returncode}:\n{site.log.read_text()}")
        booted = site.name != "gunicorn" or site.log.read_text().count("Booting worker") >= 2
        with suppress(OSError):
            if booted and site.get("/no-policy-here").status == 404:
                return
        time.sleep(0.1)
    pytest.fail(f"{site.name} did not serve within {START_TIMEOUT} s:\n{site.log.read_text()}")


@pytest.fixture(scope="module")
def servers(
    redis_standalone: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Site]]:
    """gunicorn and uvicorn, serving one database and one Redis."""
    if not redis_standalone.is_running():
        redis_standalone.start()
    workdir = tmp_path_factory.mktemp("servers")
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.server_settings",
        "RATELIMITS_SERVER_DB": str(workdir / "db.sqlite3"),
        "RATELIMITS_SERVER_REDIS": redis_standalone.url,
        "PYTHONPATH": str(ROOT),
    }
    _django(env, "migrate", "--noinput")
    create = "from django_ratelimits.models import Policy\n"
    create += f"for fields in {POLICIES!r}:\n    Policy.objects.create(**fields)"
    _django(env, "shell", "-c", create)
    wsgi_port, asgi_port = free_port(), free_port()
    gunicorn = [
        sys.executable, "-m", "gunicorn",
        "--workers", "2", "--worker-class", "sync",
        "--bind", f"127.0.0.1:{wsgi_port}",
        "--access-logfile", str(workdir / "access.log"),
        "--access-logformat", "%(p)s %(s)s %(U)s",
        "--graceful-timeout", "2",
        "demo_project.wsgi:application",
    ]  # fmt: skip
    uvicorn = [
        sys.executable, "-m", "uvicorn",
        "--host", "127.0.0.1", "--port", str(asgi_port),
        "--lifespan", "off", "--no-access-log",
        "demo_project.asgi:application",
    ]  # fmt: skip
    with ExitStack() as stack:
        yield {
            "gunicorn": stack.enter_context(_serve("gunicorn", gunicorn, env, workdir, wsgi_port)),
            "uvicorn": stack.enter_context(_serve("uvicorn", uvicorn, env, workdir, asgi_port)),
        }
    # No request ever failed with a 500, whatever Redis did.
    for name in ("gunicorn", "uvicorn"):
        output = (workdir / f"{name}.log").read_text()
        assert "Traceback" not in output and "Internal Server Error" not in output, output
    statuses = [line.split()[1] for line in (workdir / "access.log").read_text().splitlines()]
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


def test_two_gunicorn_workers_share_one_limit(
    servers: dict[str, Site], redis_server: RedisServer
) -> None:
    gunicorn = servers["gunicorn"]
    with ThreadPoolExecutor(4) as pool:
        replies = list(pool.map(lambda _: gunicorn.get("/api/hello"), range(2 * LIMIT)))
    assert sorted(r.status for r in replies) == [200] * LIMIT + [429] * LIMIT
    # Each allowed request saw its own place in the quota: no two counted as one.
    assert sorted(r.remaining for r in replies if r.status == 200) == list(range(LIMIT))
    for reply in replies:
        if reply.status == 429:
            _check_denial(reply)
    assert len({r.headers["x-worker-pid"] for r in replies}) == 2  # both workers served


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


def _report(capsys: pytest.CaptureFixture[str], what: str, replies: dict[str, list[Reply]]) -> None:
    """Print each server's latencies during the outage; assert the bound."""
    lines = []
    for name, answered in replies.items():
        seconds = sorted(r.seconds for r in answered)
        lines.append(
            f"{name} {len(seconds)} requests, max {seconds[-1] * 1000:.0f} ms, "
            f"median {seconds[len(seconds) // 2] * 1000:.1f} ms"
        )
        assert seconds[-1] < OUTAGE_BOUND, (name, seconds[-5:])
    with capsys.disabled():
        print(f"\n{what}: {'; '.join(lines)}")


def test_redis_stopped_fails_open_and_closed_fast_then_recovers(
    servers: dict[str, Site], redis_server: RedisServer, capsys: pytest.CaptureFixture[str]
) -> None:
    redis_server.stop()
    try:
        replies = _during_outage(servers, rounds=15)
    finally:
        redis_server.start()
    _report(capsys, "Redis stopped", replies)
    _recovered(servers)
    _limit_holds(servers, redis_server)


def test_redis_hung_costs_at_most_the_socket_timeout(
    servers: dict[str, Site], redis_server: RedisServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert redis_server.process is not None
    redis_server.process.send_signal(signal.SIGSTOP)  # connections open, nothing answers
    try:
        replies = _during_outage(servers, rounds=15)
    finally:
        redis_server.process.send_signal(signal.SIGCONT)
    _report(capsys, "Redis hung (SIGSTOP)", replies)
    _recovered(servers)
    _limit_holds(servers, redis_server)


def _limit_holds(servers: dict[str, Site], redis_server: RedisServer) -> None:
    for server in servers.values():
        with redis_server.client() as client:
            client.flushall()
        replies = [server.get("/api/hello") for _ in range(LIMIT + 1)]
        assert [r.status for r in replies] == [200] * LIMIT + [429], server.name
