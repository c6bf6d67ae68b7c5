"""A flood of new identities through gunicorn against a Redis with a small ``maxmemory``.

The attack of issue #9, finding 5: requests from ever new client addresses
(distinct 127.x.y.z sources; Linux routes all of 127/8 to loopback), each one
a new identity that leaves its limit state and metadata list in Redis, until
Redis is full. What happens next is Redis' ``maxmemory-policy``:

* ``allkeys-lru`` (the recommended one): Redis makes room by evicting the
  flood's idle keys, every request is still decided, and a fresh address gets
  exactly its quota, then a 429;
* ``noeviction``: Redis refuses writes, so every check fails: fail-closed
  policies answer 503, fail-open ones let requests through unlimited, and the
  server logs (and signals) the failure. ``manage.py check --deploy`` (W003) and
  ``manage.py ratelimits status`` say so.

The site is ``tests/fault_settings.py`` (signals written to the server's output)
with the reliability policies of ``tests/load/live.py``; ``tight`` (5/m per address)
records metadata, like a login form would. Each test has a gunicorn of its own,
so that no circuit breaker carries over.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from devtools.redis_harness import RedisServer, reserved_port
from tests.load.live import (
    POLICIES,
    ROOT,
    TIGHT,
    WORKERS,
    Reply,
    Site,
    access_statuses,
    assert_no_server_error,
    gunicorn,
    limit_holds,
    new_source,
    prepare,
    serve,
)

pytestmark = pytest.mark.slow

HEADROOM = 1 << 20  # bytes of maxmemory above what Redis uses before the flood
BATCH = 200  # flood requests between two looks at Redis
MAX_FLOOD = 40_000  # requests: far more than HEADROOM needs at ~500 bytes an identity
EVICTED = 1000  # keys Redis must have evicted before the flood counts as having filled it
FLOOD_PATH = "/api/other"  # the `tight` policy: every new address is counted, with metadata

_flooders = (
    f"127.{a}.{b}.{c}" for a in range(10, 250) for b in range(1, 255) for c in range(1, 255)
)


@dataclass(frozen=True)
class Bench:
    redis: RedisServer
    env: dict[str, str]
    workdir: Path


@pytest.fixture(scope="module")
def bench(redis_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    workdir = tmp_path_factory.mktemp("flood")
    redis = RedisServer(workdir / "redis", binary=redis_binary, name="flood").start()
    policies = [{**p, "record_metadata": "every"} if p["name"] == "tight" else p for p in POLICIES]
    try:
        env = prepare(workdir, redis.url, policies, DJANGO_SETTINGS_MODULE="tests.fault_settings")
        yield Bench(redis, env, workdir)
    finally:
        redis.stop()


@pytest.fixture
def site(bench: Bench) -> Iterator[Site]:
    with bench.redis.client() as client:
        client.config_set("maxmemory", "0")
        client.flushall()
    port = reserved_port()
    with serve(
        "gunicorn", gunicorn(port, bench.workdir, WORKERS), bench.env, bench.workdir, port, WORKERS
    ) as served:
        yield served
    assert_no_server_error(served)
    assert "500" not in access_statuses(bench.workdir)


def fill(redis: RedisServer, policy: str) -> int:
    """Set ``policy`` and a ``maxmemory`` of what Redis uses now plus :data:`HEADROOM`;
    return that maxmemory."""
    with redis.client() as client:
        client.config_set("maxmemory-policy", policy)
        maxmemory = int(client.info("memory")["used_memory"]) + HEADROOM
        client.config_set("maxmemory", maxmemory)
    return maxmemory


def flood(site: Site, redis: RedisServer, *, until_undecided: bool) -> list[Reply]:
    """One request from each of ever new addresses, :data:`BATCH` at a time from 8
    threads, until Redis evicted :data:`EVICTED` keys or, with ``until_undecided``,
    until a request was not decided (its check failed)."""
    replies: list[Reply] = []
    with redis.client() as client, ThreadPoolExecutor(8) as pool:
        while len(replies) < MAX_FLOOD:
            sources = [next(_flooders) for _ in range(BATCH)]
            replies += pool.map(lambda source: site.get(FLOOD_PATH, source=source), sources)
            if until_undecided and not all(r.decided for r in replies):
                return replies
            if not until_undecided and int(client.info("stats")["evicted_keys"]) >= EVICTED:
                return replies
    raise AssertionError(f"{len(replies)} flood requests did not fill Redis")


def test_under_allkeys_lru_a_flood_of_new_identities_leaves_a_fresh_limit_intact(
    site: Site, bench: Bench, capsys: pytest.CaptureFixture[str]
) -> None:
    maxmemory = fill(bench.redis, "allkeys-lru")
    replies = flood(site, bench.redis, until_undecided=False)
    # Every flood request was decided (each a new address: its first of TIGHT).
    assert {(r.status, r.remaining) for r in replies} == {(200, TIGHT - 1)}
    with bench.redis.client() as client:
        memory = client.info("memory")
    assert int(memory["maxmemory"]) == maxmemory
    with capsys.disabled():
        print(
            f"\nflood, allkeys-lru: {len(replies)} new addresses, all decided, "
            f"maxmemory {maxmemory:,} B, used {int(memory['used_memory']):,} B"
        )
    # Redis' LRU clock counts whole seconds: let the flood's keys be older than the
    # fresh address's, so that LRU tells them apart (at any machine speed).
    time.sleep(1.1)
    limit_holds(site)  # exactly TIGHT through, then a 429
    log = site.log_since(0)
    assert "backend_failed" not in log and "OOM" not in log


def test_under_noeviction_a_full_redis_fails_closed_policies_closed_and_the_rest_open(
    site: Site, bench: Bench, capsys: pytest.CaptureFixture[str]
) -> None:
    if bench.redis.version < (7,):
        # Measured on the bundled 6.2.14: the check script kept writing past maxmemory
        # (2.97 MB used of 1.99 MB after 4,000 new addresses, no OOM error), so there is
        # no write failure to observe there. Redis 7 refuses it (CI leg 2 runs this).
        pytest.skip(f"Redis {bench.redis.version} let the check script write past maxmemory")
    fill(bench.redis, "noeviction")
    replies = flood(site, bench.redis, until_undecided=True)
    with capsys.disabled():
        print(f"\nflood, noeviction: checks failed after fewer than {len(replies)} new addresses")
    assert replies[-1].status == 200  # the flood itself now passes unlimited
    source = new_source()
    fresh = [site.get(FLOOD_PATH, source=source) for _ in range(2 * TIGHT)]
    assert [r.status for r in fresh] == [200] * (2 * TIGHT)  # fail open: unlimited
    assert not any(r.decided for r in fresh)
    closed = site.get("/admin/login/", source=source)
    assert closed.status == 503  # fail closed (FAIL_CLOSED_STATUS)
    assert closed.headers["retry-after"] == "1"  # BREAKER_COOLDOWN of the test settings
    log = site.log_since(0)
    assert "command not allowed when used memory > 'maxmemory'" in log
    assert "signal backend_failed policies=tight fail_closed=False" in log
    assert "signal backend_failed policies=closed fail_closed=True" in log
    deploy = _manage(bench, "check", "--deploy", "--tag", "ratelimits_redis")
    assert "django_ratelimits.W003" in deploy and "noeviction" in deploy
    (memory,) = json.loads(_manage(bench, "ratelimits", "status", "--json"))["memory"]
    assert memory["maxmemory_policy"] == "noeviction" and memory["fails_writes"] is True


def _manage(bench: Bench, *args: str) -> str:
    """``manage.py *args`` with the site's settings: its output and errors."""
    done = subprocess.run(
        [sys.executable, "-m", "django", *args],
        env=bench.env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.stdout + done.stderr
