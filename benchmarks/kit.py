"""Interleaved rounds of timed rows, for the parts that come after the engine's.

The rows are :class:`benchmarks.engine.Scenario` and each round of a row is
the engine benchmark's own ``_run_round``: single calls timed with
``perf_counter_ns``, socket writes counted, this process's CPU time taken.
Every part has its own ``PING`` row in the same rounds, so that its ratios
compare figures measured side by side.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager

import redis

from benchmarks.engine import CountingConnection, Scenario, _run_round
from devtools.redis_harness import RedisServer

Enter = Callable[[Scenario], AbstractContextManager[object]]


def counting_client(server: RedisServer) -> redis.Redis:
    """A redis-py client whose connections count their writes."""
    pool = redis.ConnectionPool(
        connection_class=CountingConnection, host=server.host, port=server.port
    )
    return redis.Redis(connection_pool=pool)


def ping(client: redis.Redis) -> Scenario:
    return Scenario("PING (the floor)", lambda: bool(client.ping()), command="ping")


def interleave(
    scenarios: Sequence[Scenario],
    rounds: int,
    per_round: int,
    stats: redis.Redis,
    enter: Enter = lambda _: contextlib.nullcontext(),
) -> None:
    """Warm every row up with ``per_round`` calls, then time ``rounds`` rounds of each.

    ``enter(row)`` is held around the row's warm-up and each of its rounds.
    """
    for scenario in scenarios:
        with enter(scenario):
            for _ in range(per_round):
                scenario.call()
    for _ in range(rounds):
        for scenario in scenarios:
            with enter(scenario):
                _run_round(scenario, per_round, stats)


def cells(scenario: Scenario, floor: Scenario) -> str:
    """median µs | p99 µs | x PING | round trips | denied | client CPU µs."""
    return (
        f"{scenario.median_us:.1f} | {scenario.p99_us:.1f}"
        f" | {scenario.median_us / floor.median_us:.2f} | {scenario.round_trips:.3g}"
        f" | {scenario.denied} | {scenario.client_cpu_us:.1f}"
    )


CELLS_HEAD = "median µs | p99 µs | x PING | round trips | denied | client CPU µs"
CELLS_RULE = "--:|--:|--:|--:|--:|--:"
