"""Soak: mixed traffic through gunicorn and uvicorn, Redis restarted twice.

Six clients send allowed, denied, fail-closed, async and unmatched requests to
both servers (``tests.load.live.POLICIES`` plus the views' own ``@ratelimit``
policies) for ``RATELIMITS_SOAK_SECONDS`` (45 by default; the figures in
docs/reliability.md come from a longer run). Redis is stopped for 1.5 s at one
third and at two thirds of the run. At the end:

* no request failed: every answer is one its request may get (no 500, no
  refused or reset connection);
* the app processes' memory is flat: resident memory at the end is within a
  few MB of what it was after the warm-up;
* no connection leaked: Redis sees at most one more client connection per app
  process at the end than after the warm-up (the restarts dropped every old one;
  a leak would grow with the thousands of requests).

``RATELIMITS_SOAK_SECONDS=600 pytest tests/load/test_soak.py`` soaks for ten minutes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from devtools.redis_harness import RedisServer, reserved_port
from tests.load.live import (
    POLICIES,
    TARGETS,
    WORKERS,
    Reply,
    Site,
    Target,
    Traffic,
    access_statuses,
    assert_no_server_error,
    gunicorn,
    new_source,
    prepare,
    rss_kib,
    serve,
    uvicorn,
)

pytestmark = pytest.mark.slow

SECONDS = float(os.environ.get("RATELIMITS_SOAK_SECONDS", "45"))
DOWN = 1.5  # seconds Redis stays stopped at each restart
RSS_GROWTH_BOUND = 8 * 1024  # KiB an app process may grow after the warm-up


def _limited(reply: Reply) -> bool:
    return reply.status in (200, 429)


def _not_found(reply: Reply) -> bool:
    return reply.status == 404


MIXED = [
    *TARGETS,
    *(Target("/api/other", _limited, source=new_source()) for _ in range(3)),
    Target("/async", _limited),  # @ratelimit 2/m on an async view
    Target("/no-policy-here", _not_found),
]


@dataclass(frozen=True)
class Servers:
    sites: list[Site]
    redis: RedisServer


@pytest.fixture(scope="module")
def servers(redis_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    workdir = tmp_path_factory.mktemp("soak")
    redis = RedisServer(workdir / "redis", binary=redis_binary, name="soak").start()
    env = prepare(workdir, redis.url, POLICIES)
    wsgi, asgi = reserved_port(), reserved_port()
    try:
        with ExitStack() as stack:
            sites = [
                stack.enter_context(
                    serve("gunicorn", gunicorn(wsgi, workdir, WORKERS), env, workdir, wsgi, WORKERS)
                ),
                stack.enter_context(serve("uvicorn", uvicorn(asgi), env, workdir, asgi)),
            ]
            yield Servers(sites, redis)
        assert_no_server_error(*sites)
        assert "500" not in access_statuses(workdir)
    finally:
        redis.stop()


def _clients(redis: RedisServer) -> int:
    with redis.client() as conn:
        return len(conn.client_list()) - 1  # not this one


def _memory(traffics: list[Traffic]) -> dict[str, int]:
    """Resident KiB of every app process that has answered so far."""
    pids = {r.worker for traffic in traffics for r in traffic.replies}
    return {pid: rss_kib(int(pid)) for pid in pids}


def test_mixed_traffic_with_redis_restarts(
    servers: Servers, capsys: pytest.CaptureFixture[str]
) -> None:
    redis = servers.redis
    started = time.monotonic()
    with ExitStack() as stack:
        traffics = [
            stack.enter_context(Traffic(site, MIXED, clients=3, pause=0.005))
            for site in servers.sites
        ]
        warm_up = min(10.0, SECONDS / 6)
        time.sleep(warm_up)
        memory_before, connections_before = _memory(traffics), _clients(redis)
        for restart_at in (SECONDS / 3, 2 * SECONDS / 3):
            time.sleep(max(0.0, started + restart_at - time.monotonic()))
            redis.stop()
            time.sleep(DOWN)
            redis.start()
        time.sleep(max(0.0, started + SECONDS - time.monotonic()))
        memory_after, connections_after = _memory(traffics), _clients(redis)
    served = sum(len(t.replies) for t in traffics)
    errors = [e for t in traffics for e in t.errors]
    growth = {pid: memory_after[pid] - kib for pid, kib in memory_before.items()}
    with capsys.disabled():
        print(
            f"\nsoak: {SECONDS:.0f} s, {served} requests, {len(errors)} errors, 2 Redis restarts; "
            f"RSS after warm-up {sorted(k // 1024 for k in memory_before.values())} MB, "
            f"growth {sorted(round(g / 1024, 1) for g in growth.values())} MB; "
            f"Redis client connections {connections_before} -> {connections_after}"
        )
    assert not errors, errors[:5]
    assert len(memory_before) == WORKERS + 1  # both gunicorn workers and uvicorn answered
    assert max(growth.values()) < RSS_GROWTH_BOUND, growth
    # A leak grows with the requests (thousands here). What may grow without one: a pool
    # that opens a connection later than the warm-up did, e.g. when a CPU hog makes more
    # requests overlap, or the first batch of cached denials recorded from a thread. At
    # most one such connection per app process.
    assert connections_after <= connections_before + len(memory_before)
