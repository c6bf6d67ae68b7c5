"""The sliding window's kept readings decide exactly as reading each value anew.

Where Redis keeps the check's code loaded (a Redis 7 function), the sliding window keeps
what it read of a busy identity's value between calls and, on the next call, reads only
what the last charge changed (``sliding_window.lua``). The script sent with ``EVALSHA``
(as on Redis 6) runs anew on every call, so it reads every value from its text. Hypothesis
drives both with the same steps: checks and peeks of two identities under one to three
sliding windows, the clock moving forward and back, values written or deleted by hand.
Every decision and every field the two keep must be the same.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_ratelimits.engine import Algorithm, Check, Engine, Identity, Limit
from django_ratelimits.rates import Rate
from tests.engine_helpers import EPOCH_US, fresh_engine, outcomes

IDENTITIES = (Identity("ip", "203.0.113.9"), Identity("user", "42"))
HYPOTHESIS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


class Clock:
    """A test clock that may go back (the FakeClock never does)."""

    def __init__(self, now: int) -> None:
        self.now = now

    def now_us(self) -> int:
        return self.now


# Values written by hand over what the script wrote: "{b}" is the bucket of the
# clock's time for a 1 s window (100 ms buckets), so that some of them are live.
HAND_WRITTEN = [
    "",
    "not a number",
    "{b} 3",
    "{b0} 1 {b1} 2 {b} 1",  # as the script writes them
    "{b1} 2 {b0} 1 {b} 1",  # out of order
    "{b0} 0 {b1} 2 {b} 1",  # a bucket that counts nothing
    "{b0} 1 {b1} 2 {b} 1 tail",  # something after the last pair
    "{b0} 1 {b1} 2 {b2} 1",  # a bucket ahead of the clock
]

steps = st.lists(
    st.one_of(
        st.tuples(st.just("advance"), st.integers(0, 150_000)),
        st.tuples(st.just("advance"), st.integers(0, 4_000_000)),
        st.tuples(st.just("back"), st.integers(1, 2_000_000)),
        st.tuples(st.just("check"), st.integers(1, 3), st.sampled_from(["ip", "user", "both"])),
        st.tuples(st.just("peek"), st.integers(0, 3), st.sampled_from(["ip", "both"])),
        st.tuples(st.just("write"), st.sampled_from(HAND_WRITTEN), st.sampled_from([0, 1])),
        st.tuples(st.just("delete"), st.sampled_from([0, 1])),
    ),
    min_size=1,
    max_size=80,
)


def _engines(client: Any, start: int) -> tuple[Clock, Engine, Engine]:
    """A clock at ``start``, and two engines on it: one calls the Redis 7 function
    (readings kept), the other the script (every value read from its text)."""
    clock = Clock(start)
    kept, read = fresh_engine(client, clock), fresh_engine(client, clock)
    read._functions = False
    return clock, kept, read


SECOND = EPOCH_US - EPOCH_US % 1_000_000  # the start of a second


def _state(client: Any, engine: Engine) -> list[dict[bytes, bytes]]:
    return [client.hgetall(engine.keys.of(identity).state) for identity in IDENTITIES]


@HYPOTHESIS
@given(
    rates=st.lists(
        st.tuples(st.integers(3, 40), st.sampled_from([1, 2, 60])),
        min_size=1,
        max_size=3,
        unique_by=lambda rate: rate[1],
    ),
    ops=steps,
)
def test_kept_readings_decide_as_the_text_read_anew(
    redis_client: Any, rates: list[tuple[int, int]], ops: list[tuple[Any, ...]]
) -> None:
    clock, kept, read = _engines(redis_client, EPOCH_US)
    limits = [Limit("p", Rate(n, period), Algorithm.SLIDING_WINDOW) for n, period in rates]
    first = limits[0]  # the one hand-written values go to
    for op in ops:
        if op[0] == "advance":
            clock.now += op[1]
        elif op[0] == "back":
            clock.now -= op[1]
        elif op[0] in ("write", "delete"):
            b = clock.now // (first.rate.window_us // 10)
            for engine in (kept, read):
                key = engine.keys.of(IDENTITIES[op[-1]]).state
                if op[0] == "delete":
                    redis_client.delete(key)
                else:
                    text = op[1].format(b=b, b0=b - 2, b1=b - 1, b2=b + 1)
                    redis_client.hset(key, first.spec, text)
        else:
            who = {"ip": IDENTITIES[:1], "user": IDENTITIES[1:], "both": IDENTITIES}[op[2]]
            checks = [Check(identity, limits) for identity in who]
            call = "check" if op[0] == "check" else "peek"
            got = outcomes(getattr(kept, call)(checks, cost=op[1]))
            expected = outcomes(getattr(read, call)(checks, cost=op[1]))
            assert got == expected, op
        assert _state(redis_client, kept) == _state(redis_client, read), op


def test_a_busy_identity_is_decided_by_its_kept_reading_and_by_its_text_alike(
    redis_client: Any,
) -> None:
    """200 requests a second at 150 a second for 3 s (a reading kept from the third
    bucket on, and its buckets sliding out), the counts halved by hand after 1 s: both
    engines allow and refuse the same requests."""
    clock, kept, read = _engines(redis_client, SECOND)
    limits = [Limit("p", Rate(150, 1), Algorithm.SLIDING_WINDOW)]
    verdicts: dict[str, list[Any]] = {"kept": [], "read": []}
    for step in range(600):
        if step == 200:  # by hand: every bucket's count halved
            for engine in (kept, read):
                key = engine.keys.of(IDENTITIES[0]).state
                pairs = redis_client.hget(key, limits[0].spec).decode().split()
                halved = [p if i % 2 == 0 else str(int(p) // 2) for i, p in enumerate(pairs)]
                redis_client.hset(key, limits[0].spec, " ".join(halved))
        for name, engine in (("kept", kept), ("read", read)):
            verdicts[name].append(outcomes(engine.check([Check(IDENTITIES[0], limits)])))
        assert _state(redis_client, kept) == _state(redis_client, read), step
        clock.now += 5_000
    assert verdicts["kept"] == verdicts["read"]
    allowed = [results[0][1] for results in verdicts["kept"]]
    assert allowed[:150] == [True] * 150  # 0.75 s: the 150 fit
    assert allowed[150:200] == [False] * 50  # no bucket slid out before 1.1 s
    assert allowed[200]  # 75 counted after the halving


def test_buckets_a_look_left_out_count_again_when_the_clock_goes_back(
    redis_client: Any,
) -> None:
    """A peek after the oldest buckets slid out writes nothing: the value still holds
    them, and a check after the clock went back counts them, as the text read anew does."""
    clock, kept, read = _engines(redis_client, SECOND)
    limits = [Limit("p", Rate(7, 1), Algorithm.SLIDING_WINDOW)]
    checks = [Check(IDENTITIES[0], limits)]
    for _ in range(6):  # six buckets of one request each: a reading is kept
        assert kept.check(checks).allowed and read.check(checks).allowed
        clock.now += 100_000
    clock.now += 600_000  # the first two buckets slid out
    assert outcomes(kept.peek(checks)) == outcomes(read.peek(checks))
    clock.now -= 600_000  # back: all six live again, one request left
    got = [outcomes(kept.check(checks)) for _ in range(2)]
    assert got == [outcomes(read.check(checks)) for _ in range(2)]
    assert [results[0][1] for results in got] == [True, False]


def test_a_look_proposes_no_empty_bucket_that_a_hand_written_value_would_then_match(
    redis_client: Any,
) -> None:
    """A peek of cost 0 in a new bucket computes the text with that bucket at 0. Written
    by hand, that text has a bucket that counts nothing, which the reading must not take
    for the newest: both engines give the same reset."""
    clock, kept, read = _engines(redis_client, SECOND)
    limits = [Limit("p", Rate(20, 1), Algorithm.SLIDING_WINDOW)]
    checks = [Check(IDENTITIES[0], limits)]
    for _ in range(5):  # a reading is kept
        assert outcomes(kept.check(checks)) == outcomes(read.check(checks))
        clock.now += 100_000
    assert outcomes(kept.peek(checks, cost=0)) == outcomes(read.peek(checks, cost=0))
    bucket = clock.now // 100_000
    for engine in (kept, read):
        key = engine.keys.of(IDENTITIES[0]).state
        text = redis_client.hget(key, limits[0].spec).decode()
        redis_client.hset(key, limits[0].spec, f"{text} {bucket} 0")
    clock.now += 100_000
    assert outcomes(kept.peek(checks, cost=0)) == outcomes(read.peek(checks, cost=0))


def test_a_crowd_of_identities_each_busy_in_turn_keeps_bounded_readings(
    clean_standalone: Any,
) -> None:
    """An attacker who makes identity after identity busy (six requests each, in six
    buckets: each earns a reading) cannot grow what the library keeps: at most 400 state
    keys' readings. Kept without a bound, 3,000 such identities' readings grew the
    library's memory by about 5.5 MB; bounded, by about 0.5 MB."""
    if clean_standalone.version < (7,):
        pytest.skip("readings are kept by the Redis 7 function library only")
    client = clean_standalone.client()
    clock = Clock(SECOND)
    engine = fresh_engine(client, clock)
    limits = [Limit("p", Rate(100, 1), Algorithm.SLIDING_WINDOW)]
    engine.check([Check(Identity("ip", "192.0.2.1"), limits)])  # the library loaded
    before = client.info("memory")["used_memory_vm_functions"]
    for i in range(3000):
        checks = [Check(Identity("ip", f"198.18.{i // 256}.{i % 256}"), limits)]
        for _ in range(6):
            assert engine.check(checks).allowed
            clock.now += 100_000
    grown = client.info("memory")["used_memory_vm_functions"] - before
    assert grown < 2_000_000
