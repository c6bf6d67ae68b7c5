"""Concurrency limits under real servers: gunicorn (threads, then a worker killed with
``kill -9``) and uvicorn, with a view that holds its slot until the test lets it go
(``tests/load/inflight_views.py``)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

from devtools.redis_harness import RedisServer, reserved_port
from tests.load.inflight_views import GATE
from tests.load.live import Reply, Site, assert_no_server_error, gunicorn, prepare, serve, uvicorn

pytestmark = pytest.mark.slow

SLOTS, CLIENTS = 2, 6
DEADLINE = 60.0  # seconds to wait for an eventual state: generous, never a timing bound


def policies(lease: int) -> list[dict[str, object]]:
    return [
        {
            "name": "held",
            "algorithm": "concurrency",
            "rates": str(SLOTS),
            "lease": lease,
            "path": r"^/held",
        }
    ]


@contextmanager
def site_of(kind: str, redis_server: RedisServer, workdir: Path, lease: int) -> Iterator[Site]:
    env = prepare(
        workdir,
        redis_server.url,
        policies(lease),
        DJANGO_SETTINGS_MODULE="tests.load.inflight_settings",
    )
    port = reserved_port()
    if kind == "gunicorn":  # one worker, threads: the held requests share one process
        argv = [*gunicorn(port, workdir, workers=1), "--threads", "8"]
        with serve(kind, argv, env, workdir, port, workers=1) as site:
            yield site
    else:
        with serve(kind, uvicorn(port), env, workdir, port) as site:
            yield site
    assert_no_server_error(site)


@pytest.fixture
def client(redis_standalone: RedisServer) -> Iterator[redis.Redis]:
    if not redis_standalone.is_running():
        redis_standalone.start()
    with redis_standalone.client() as conn:
        conn.flushall()
        yield conn
        conn.rpush(GATE, *["go"] * 20)  # whatever still waits ends


def slots_held(client: redis.Redis) -> int:
    """Members of the policy's slots ZSET (tests may scan; the engine never does)."""
    return sum(client.zcard(key) for key in client.scan_iter(match="*:cc:held:*"))


def eventually(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {DEADLINE} s: {what}")
        time.sleep(0.05)


def held_requests(site: Site, pool: ThreadPoolExecutor, n: int) -> list[Future[Reply]]:
    return [pool.submit(site.get, "/held") for _ in range(n)]


@pytest.mark.parametrize("kind", ["gunicorn", "uvicorn"])
def test_exactly_the_slots_are_admitted_and_freed_when_the_views_end(
    kind: str,
    client: redis.Redis,
    redis_standalone: RedisServer,
    tmp_path: Path,
) -> None:
    with site_of(kind, redis_standalone, tmp_path, lease=60) as site:
        with ThreadPoolExecutor(CLIENTS) as pool:
            replies = held_requests(site, pool, CLIENTS)
            # The refused answer at once; the admitted wait for their token.
            eventually(lambda: sum(r.done() for r in replies) == CLIENTS - SLOTS, "4 refusals")
            refused = [r.result() for r in replies if r.done()]
            assert [r.status for r in refused] == [429] * (CLIENTS - SLOTS)
            assert all(r.headers["retry-after"] == "1" for r in refused)
            assert slots_held(client) == SLOTS
            client.rpush(GATE, *["go"] * SLOTS)
            statuses = sorted(r.result().status for r in replies)
        assert statuses == [200] * SLOTS + [429] * (CLIENTS - SLOTS)
        eventually(lambda: slots_held(client) == 0, "the responses' ends free the slots")
        client.rpush(GATE, *["go"] * SLOTS)
        with ThreadPoolExecutor(SLOTS) as pool:
            again = [r.result().status for r in held_requests(site, pool, SLOTS)]
        assert again == [200] * SLOTS


def test_the_slots_of_a_killed_gunicorn_worker_are_freed_by_their_lease(
    client: redis.Redis, redis_standalone: RedisServer, tmp_path: Path
) -> None:
    with site_of("gunicorn", redis_standalone, tmp_path, lease=2) as site:
        worker = int(site.get("/no-policy-here").worker)
        with ThreadPoolExecutor(SLOTS) as pool:
            replies = held_requests(site, pool, SLOTS)
            eventually(lambda: slots_held(client) == SLOTS, "both requests hold a slot")
            os.kill(worker, signal.SIGKILL)  # the worker dies holding them: nobody releases
            for reply in replies:
                with pytest.raises(OSError):  # the connection dies with the worker
                    reply.result()
        assert slots_held(client) == SLOTS, "the slots outlive the worker until their lease"
        client.rpush(GATE, *["go"] * 50)

        def admitted() -> bool:
            try:
                return site.get("/held").status == 200
            except OSError:  # the master is still starting the new worker
                return False

        eventually(admitted, "a request is admitted once the leases end")
        assert slots_held(client) <= SLOTS
