"""Accuracy against the exact sliding log, replayed through Redis.

The guarantees the docs state: the sliding log and the sliding window never
admit more than the limit in any window; the fixed window and the weighted
counter can reach (but not pass) twice the limit at a window boundary.
"""

from __future__ import annotations

from typing import Any

import pytest

from devtools import accuracy
from django_ratelimits.engine import RATE_ALGORITHMS, Algorithm, Check, Identity, Limit
from django_ratelimits.rates import Rate
from django_ratelimits.testing import FakeClock
from tests.engine_helpers import fresh_engine

WORST_ALLOWED = {
    Algorithm.SLIDING_LOG: 1.0,
    Algorithm.SLIDING_WINDOW: 1.0,
    Algorithm.FIXED_WINDOW: 2.0,
    Algorithm.SLIDING_WINDOW_COUNTER: 2.0,
    Algorithm.TOKEN_BUCKET: 2.0,
    Algorithm.GCRA: 2.0,
}


def redis_decider(client: Any, algorithm: Algorithm) -> accuracy.Decide:
    clock = FakeClock(accuracy.START_US)
    engine = fresh_engine(client, clock)
    rate = Rate(accuracy.LIMIT, accuracy.WINDOW_US // 1_000_000)
    checks = [Check(Identity("ip", "192.0.2.1"), [Limit("acc", rate, algorithm)])]

    def decide(now: int) -> bool:
        clock.advance(us=now - clock.now_us())
        return engine.check(checks).allowed

    return decide


@pytest.mark.parametrize("algorithm", RATE_ALGORITHMS)
def test_boundary_attack_through_redis(redis_standalone: Any, algorithm: Algorithm) -> None:
    trace = accuracy.boundary(step_us=500_000)
    got = accuracy.measure(redis_decider(redis_standalone.client(), algorithm), trace)
    assert got == accuracy.measure(accuracy.model_decider(algorithm), trace)
    assert got[1] <= WORST_ALLOWED[algorithm]
    if WORST_ALLOWED[algorithm] > 1:
        assert got[1] > 1.5, "the attack should show this algorithm's boundary burst"


@pytest.mark.parametrize("trace", list(accuracy.TRACES))
@pytest.mark.parametrize("algorithm", RATE_ALGORITHMS)
def test_worst_window_stays_within_the_stated_bound(algorithm: Algorithm, trace: str) -> None:
    _, worst = accuracy.measure(accuracy.model_decider(algorithm), accuracy.TRACES[trace]())
    assert worst <= WORST_ALLOWED[algorithm]
