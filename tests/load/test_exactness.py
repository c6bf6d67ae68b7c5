"""Exactness under heavy concurrency: 4 processes x 16 threads, 20 runs, every algorithm
that promises never to admit more than its limit.

Each run races all 64 threads on a new identity per algorithm, at one fixed fake
instant (so no window moves and no token refills during the race): exactly the
limit must pass in every run, on standalone Redis and on the cluster. The
processes start each run together by wall-clock time; ``tests/engine/test_engine_concurrency.py``
is the quick version of this test (one run, fewer threads), which runs on every
``-m "not slow"`` pass.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.pool import Pool
from typing import Any

import pytest
from redis.cluster import RedisCluster

from django_ratelimits.engine import (
    RATE_ALGORITHMS,
    Algorithm,
    Check,
    Engine,
    Identity,
    KeySpace,
    Limit,
)
from django_ratelimits.rates import Rate
from django_ratelimits.testing import FakeClock
from tests.engine_helpers import EPOCH_US, client_of

pytestmark = pytest.mark.slow

PROCESSES, THREADS, RUNS = 4, 16, 20
LIMIT, ATTEMPTS = 50, 2  # per thread and algorithm: 128 attempts race for 50 places
RUN_SECONDS = 0.3  # wall-clock slot of one run, so that the processes race in each
# Every algorithm that promises never to admit more than its limit (docs/algorithms.md);
# the sliding window counter is an approximation by design.
EXACT = [a for a in RATE_ALGORITHMS if a is not Algorithm.SLIDING_WINDOW_COUNTER]


def race(
    nodes: list[tuple[str, int]], cluster: bool, prefix: str, start_at: float
) -> list[list[int]]:
    """One process: per run, THREADS threads race; returns its admissions per run and
    algorithm (in the order of ``EXACT``)."""
    client = client_of(nodes, cluster, THREADS)
    engine = Engine(client, keys=KeySpace(prefix=prefix), clock=FakeClock(EPOCH_US))

    def checks(run: int) -> list[list[Check]]:
        identity = Identity("ip", f"198.51.100.{run}")
        return [[Check(identity, [Limit(f"x{a.code}", Rate(LIMIT, 60), a)])] for a in EXACT]

    engine.peek(checks(0)[0])  # connect and load the script before the start
    barrier = threading.Barrier(THREADS)

    def thread(run: int) -> list[int]:
        barrier.wait()
        admitted = [0] * len(EXACT)
        for _ in range(ATTEMPTS):
            for n, check in enumerate(checks(run)):
                admitted[n] += engine.check(check).allowed
        return admitted

    runs = []
    with ThreadPoolExecutor(THREADS) as pool:
        for run in range(RUNS):
            time.sleep(max(0.0, start_at + run * RUN_SECONDS - time.time()))
            runs.append([sum(n) for n in zip(*pool.map(thread, [run] * THREADS), strict=True)])
    return runs


@pytest.fixture(scope="module")
def processes() -> Iterator[Pool]:
    with multiprocessing.get_context("spawn").Pool(PROCESSES) as pool:
        yield pool


def test_every_run_admits_exactly_the_limit(
    redis_client: Any,
    request: pytest.FixtureRequest,
    processes: Pool,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cluster = isinstance(redis_client, RedisCluster)
    harness = request.getfixturevalue("redis_cluster" if cluster else "redis_standalone")
    nodes = harness.nodes if cluster else [(harness.host, harness.port)]
    start_at = time.time() + 2.0  # every process connected and waiting by then
    started = time.monotonic()
    per_process = processes.starmap(race, [(nodes, cluster, "exact", start_at)] * PROCESSES)
    seconds = time.monotonic() - started
    # totals[run][n]: what all processes admitted in that run under EXACT[n]
    totals = [[sum(n) for n in zip(*run, strict=True)] for run in zip(*per_process, strict=True)]
    racing = [sum(1 for p in per_process if any(p[run])) for run in range(RUNS)]
    with capsys.disabled():
        print(
            f"\nexactness ({'cluster' if cluster else 'standalone'}): {RUNS} runs x "
            f"{len(EXACT)} algorithms, {PROCESSES} processes x {THREADS} threads, "
            f"{PROCESSES * THREADS * ATTEMPTS} attempts per run and algorithm for {LIMIT} "
            f"places: admitted {sorted({n for run in totals for n in run})} per run and "
            f"algorithm, in {seconds:.1f} s"
        )
    assert totals == [[LIMIT] * len(EXACT)] * RUNS
    # A run in which one process took every place would not have been a race between them.
    assert min(racing) >= 2, racing
