"""The Redis scripts and the pure-Python reference model decide identically.

Hypothesis drives both with the same random limits, identities, costs and
fake-clock steps; every result (allowed, remaining, retry, reset) must match
to the microsecond, for every algorithm, on standalone Redis and on a cluster.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devtools.reference import ReferenceEngine
from django_ratelimits.engine import Algorithm, Check, Gate, Identity, Limit
from django_ratelimits.rates import Rate
from django_ratelimits.testing import FakeClock
from tests.engine_helpers import EPOCH_US, fresh_engine, outcomes

IDENTITIES = (Identity("ip", "203.0.113.9"), Identity("user", "42"))
HYPOTHESIS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@st.composite
def limit_sets(draw: Any, max_limit: int, periods: list[int]) -> list[Limit]:
    algorithm = draw(st.sampled_from(list(Algorithm)))
    chosen = draw(st.lists(st.sampled_from(periods), min_size=1, max_size=3, unique=True))
    if algorithm is Algorithm.CONCURRENCY:  # one rate (N, lease) per concurrency policy
        chosen = chosen[:1]
    limits = []
    for period in chosen:
        rate = Rate(draw(st.integers(1, max_limit)), period)
        burst = None
        if algorithm.has_burst and draw(st.booleans()):
            interval = -(-rate.window_us // rate.limit)
            burst = draw(st.integers(1, min(max_limit * 2, 1_000_000, 2**52 // interval)))
        limits.append(Limit("p", rate, algorithm, burst))
    return limits


steps = st.lists(
    st.one_of(
        st.tuples(st.just("advance"), st.integers(0, 3_000_000)),
        st.tuples(st.just("advance"), st.integers(0, 200_000_000)),
        st.tuples(st.just("check"), st.integers(1, 4), st.sampled_from(["ip", "user", "both"])),
        st.tuples(st.just("peek"), st.integers(0, 4), st.sampled_from(["ip", "both"])),
        # Each limit charging a cost of its own (a policy's cost per request).
        st.tuples(st.just("costly"), st.integers(1, 4), st.sampled_from(["ip", "both"])),
    ),
    min_size=1,
    max_size=60,
)


def _replay(client: Any, limits: list[Limit], start: int, ops: list[tuple[Any, ...]]) -> None:
    clock = FakeClock(start)
    engine = fresh_engine(client, clock)
    model = ReferenceEngine(engine.keys)
    capacity = min(limit.capacity for limit in limits)
    for op in ops:
        if op[0] == "advance":
            clock.advance(us=op[1])
            continue
        who = {"ip": IDENTITIES[:1], "user": IDENTITIES[1:], "both": IDENTITIES}[op[2]]
        checks = [Check(identity, limits) for identity in who]
        cost = min(op[1], capacity)
        if op[0] == "costly" and limits[0].algorithm is not Algorithm.CONCURRENCY:
            # Above a burst too: the bucket passes it when full, and is left in debt.
            costs = tuple(min(op[1] + i, limit.most_cost) for i, limit in enumerate(limits))
            checks = [Check(identity, limits, costs=costs) for identity in who]
        charge = op[0] != "peek"
        got = outcomes((engine.check if charge else engine.peek)(checks, cost=cost))
        expected = model.run(checks, clock.now_us(), cost, charge=charge)
        assert got == expected, (op, limits)


@HYPOTHESIS
@given(
    limits=limit_sets(max_limit=12, periods=[1, 2, 5, 60]),
    start=st.integers(EPOCH_US, EPOCH_US + 10**9),
    ops=steps,
)
def test_small_limits_match_the_model(
    redis_client: Any, limits: list[Limit], start: int, ops: list[tuple[Any, ...]]
) -> None:
    _replay(redis_client, limits, start, ops)


@HYPOTHESIS
@given(
    limits=limit_sets(max_limit=1_000_000, periods=[7, 3600, 86_400, 30 * 86_400]),
    start=st.integers(EPOCH_US, EPOCH_US + 10**12),
    ops=steps,
)
def test_large_rates_and_long_windows_match_the_model(
    redis_client: Any, limits: list[Limit], start: int, ops: list[tuple[Any, ...]]
) -> None:
    """Float paths (token bucket, GCRA, the weighted counter) at extreme magnitudes."""
    _replay(redis_client, limits, start, ops)


# The address's own check beside a gated one: none, another policy's, the gated check's
# first limit, or all of its limits (a policy counting the address and the user: over
# budget, the user is counted against the address once).
OWN = (None, "other", "first", "same")
gated_steps = st.lists(
    st.one_of(
        st.tuples(st.just("advance"), st.integers(0, 3_000_000)),
        st.tuples(st.just("check"), st.integers(1, 3), st.integers(0, 5), st.sampled_from(OWN)),
        st.tuples(st.just("peek"), st.integers(0, 3), st.integers(0, 5), st.sampled_from(OWN)),
    ),
    min_size=1,
    max_size=60,
)


@HYPOTHESIS
@given(
    limits=limit_sets(max_limit=6, periods=[1, 2, 5, 60]),
    budget=st.builds(Rate, st.integers(1, 3), st.sampled_from([1, 2, 5])),
    start=st.integers(EPOCH_US, EPOCH_US + 10**9),
    ops=gated_steps,
)
def test_identity_budgets_match_the_model(
    redis_client: Any, limits: list[Limit], budget: Rate, start: int, ops: list[tuple[Any, ...]]
) -> None:
    """Six header values from one address, with and without the address's own check
    (another policy's, or some or all of the same limits): the gate, the fallback to
    the address and every result agree with the model."""
    clock = FakeClock(start)
    engine = fresh_engine(redis_client, clock)
    model = ReferenceEngine(engine.keys)
    client = IDENTITIES[0]
    capacity = min(limit.capacity for limit in limits)
    for op in ops:
        if op[0] == "advance":
            clock.advance(us=op[1])
            continue
        gated = Check(Identity("header", f"key-{op[2]}"), limits, gate=Gate(client, budget))
        own = {
            None: [],
            "other": [Check(client, [Limit("ip-policy", Rate(50, 1))])],
            "first": [Check(client, limits[:1])],
            "same": [Check(client, limits)],
        }[op[3]]
        checks = [*own, gated]
        cost = min(op[1], capacity)
        if op[0] == "check":
            got = outcomes(engine.check(checks, cost=cost))
        else:
            got = outcomes(engine.peek(checks, cost=cost))
        expected = model.run(checks, clock.now_us(), cost, charge=op[0] == "check")
        assert got == expected, (op, limits, budget)
