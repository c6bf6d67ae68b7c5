"""The cache of denials across processes: two gunicorn sites (one worker each, two
processes with caches of their own) on one Redis, serving ``tests.urls`` with one
policy, ``api``: ``^/api/hello``, 2/h per address, sliding log (no window rolls over
while the test runs, however slow the machine).

What holds at any speed: a flood costs Redis no check per denied request beyond the
batches and epoch reads that the elapsed time allows; every refusal is in the offender
record once both processes exited; a lift reaches both processes (well before the
minute an entry may be held without it).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.test import override_settings

from devtools.redis_harness import RedisServer
from django_ratelimits.deny_cache import BATCH_REQUESTS, BATCH_US
from django_ratelimits.engine import Identity
from django_ratelimits.offenders import Offenders
from tests.load.live import Site, gunicorn_site, new_source

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

POLICY: dict[str, object] = {
    "name": "api",
    "rates": "2/h",
    "algorithm": "sliding_log",
    "path": r"^/api/hello",
}
FLOOD = 500  # denied requests per process
HANG_GUARD = 30.0  # seconds: far less than the minute an entry may be held (HOLD_MAX_US)


@contextmanager
def two_sites(redis_server: RedisServer, workdir: Path) -> Iterator[tuple[Site, Site]]:
    with ExitStack() as stack:
        sites = []
        for name in ("a", "b"):
            (workdir / name).mkdir()
            sites.append(
                stack.enter_context(
                    gunicorn_site(redis_server, workdir / name, [POLICY], workers=1)
                )
            )
        yield sites[0], sites[1]


def scripts_run(client: redis.Redis) -> int:
    """Script and function calls Redis ran: checks, and the cache's batches."""
    stats = client.info("commandstats")
    return sum(stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in ("fcall", "evalsha", "eval"))


def test_a_flood_costs_no_check_per_denied_request_and_every_refusal_is_counted(
    redis_standalone: RedisServer, tmp_path: Path
) -> None:
    source = new_source()
    with two_sites(redis_standalone, tmp_path) as (a, b), redis_standalone.client() as client:
        assert [a.get("/api/hello", source=source).status for _ in range(2)] == [200, 200]
        # Each process: a denial makes it read the epoch, the next is learnt.
        for site in (a, b):
            assert [site.get("/api/hello", source=source).status for _ in range(2)] == [429] * 2
        before, started = scripts_run(client), time.monotonic()
        for site in (a, b):
            assert {site.get("/api/hello", source=source).status for _ in range(FLOOD)} == {429}
        ran, seconds = scripts_run(client) - before, time.monotonic() - started
    # At most: a batch per BATCH_REQUESTS refusals, one per BATCH_US of the flood and
    # one at exit per process, each perhaps loading its script first (3 commands).
    per_interval = seconds / (BATCH_US / 1e6)
    batches = 2 * FLOOD / BATCH_REQUESTS + 2 * (per_interval + 1)
    assert ran <= 3 * batches, (ran, seconds)
    # A call per denied request would be 2 * FLOOD. Fewer than a tenth of FLOOD, plus
    # the batches the flood's time brings (a busy machine's flood takes longer, and
    # each process records one per BATCH_US: a fixed bound failed a slow enough run).
    assert ran < FLOOD / 10 + 2 * per_interval, (ran, seconds)
    # Both processes exited: what they refused is in the record, every request once.
    with override_settings(
        DJANGO_RATELIMITS={**settings.DJANGO_RATELIMITS, "REDIS": redis_standalone.url}
    ):
        offender = Offenders().inspect(Identity("ip", source)).detail.offender
    assert offender is not None
    assert offender.denials == 2 * 2 + 2 * FLOOD
    assert offender.by_policy == {"api": 2 * 2 + 2 * FLOOD}


def test_a_lift_reaches_both_processes(redis_standalone: RedisServer, tmp_path: Path) -> None:
    source = new_source()
    with (
        two_sites(redis_standalone, tmp_path) as (a, b),
        override_settings(
            DJANGO_RATELIMITS={**settings.DJANGO_RATELIMITS, "REDIS": redis_standalone.url}
        ),
    ):
        who = Identity("ip", source)
        Offenders().block(who, 3600)
        for site in (a, b):  # the block, learnt by each process and cached
            assert [site.get("/api/hello", source=source).status for _ in range(3)] == [429] * 3
        lifted = time.monotonic()
        Offenders().lift(who)
        for site in (a, b):
            while (status := site.get("/api/hello", source=source).status) == 429:
                assert time.monotonic() - lifted < HANG_GUARD, "the lift never reached a worker"
                time.sleep(0.05)
            assert status == 200
