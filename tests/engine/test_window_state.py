"""The windows' state as the check script keeps it in the identity's HASH.

The sliding window writes a limit's buckets as ``<index> <count>`` pairs, oldest first,
one space apart. On an allowed check it keeps the live pairs' text and writes only the
charged bucket anew; a value out of that order (the clock went back) is read all the
same and rewritten whole. The sliding window counter's ``<window> <count> <previous
count>`` and the fixed window's ``<window> <count>`` keep the text they read but the
count. These tests pin both ways to what users rely on: the decisions, and a value
every later check reads the same. (What the script keeps is its own writing: a value
written by hand with leading zeros or other separators is decided the same, but its
text is kept as it is.)
"""

from __future__ import annotations

from typing import Any

from django_ratelimits.engine import Algorithm, Check, Identity, Limit
from django_ratelimits.rates import Rate
from django_ratelimits.testing import FakeClock
from tests.engine_helpers import EPOCH_US, fresh_engine

IP = Identity("ip", "198.51.100.20")
LIMIT = Limit("api", Rate(5, 1), Algorithm.SLIDING_WINDOW)
STEP_US = 100_000  # a bucket: a tenth of the 1 s window
B0 = EPOCH_US // STEP_US  # the bucket the clock starts in


def _stored(client: Any, engine: Any, limit: Limit = LIMIT) -> str:
    value = client.hget(engine.keys.of(IP).state, limit.spec)
    return value.decode() if value is not None else ""


def _store(client: Any, engine: Any, value: str) -> None:
    client.hset(engine.keys.of(IP).state, LIMIT.spec, value)


def test_buckets_are_kept_oldest_first_and_slide_out(redis_client: Any) -> None:
    clock = FakeClock(EPOCH_US)
    engine = fresh_engine(redis_client, clock)
    check = [Check(IP, [LIMIT])]
    assert engine.check(check).allowed
    clock.advance(us=50_000)  # the same bucket: its count grows
    assert engine.check(check).allowed
    assert _stored(redis_client, engine) == f"{B0} 2"
    clock.advance(us=200_000)  # two buckets on: a pair after it
    assert engine.check(check).allowed
    assert _stored(redis_client, engine) == f"{B0} 2 {B0 + 2} 1"
    assert engine.check(check).allowed  # the newest of two live pairs grows
    assert _stored(redis_client, engine) == f"{B0} 2 {B0 + 2} 2"
    clock.advance(us=200_000)  # a third pair after two live ones
    decision = engine.check(check)
    assert decision.allowed and decision.results[0].remaining == 0
    assert _stored(redis_client, engine) == f"{B0} 2 {B0 + 2} 2 {B0 + 4} 1"
    clock.advance(us=700_000)  # bucket B0 + 11: B0 slid out, B0 + 2 and B0 + 4 are live
    decision = engine.check(check)
    assert decision.allowed and decision.results[0].remaining == 5 - 3 - 1
    assert _stored(redis_client, engine) == f"{B0 + 2} 2 {B0 + 4} 1 {B0 + 11} 1"


def _charged_once(client: Any, bucket: int, value: str) -> tuple[int, str]:
    """With ``value`` stored, one request at bucket ``B0 + bucket``, which must pass: the
    quota it leaves, and the value stored after it."""
    engine = fresh_engine(client, FakeClock(EPOCH_US + bucket * STEP_US))
    _store(client, engine, value)
    decision = engine.check([Check(IP, [LIMIT])])
    assert decision.allowed
    return decision.results[0].remaining, _stored(client, engine)


def test_a_value_out_of_order_is_read_whole_and_rewritten(redis_client: Any) -> None:
    # Two live pairs in order, a bucket that slid out between them: it is dropped.
    stored = f"{B0 + 1} 1 {B0 - 20} 4 {B0 + 3} 2"
    after = f"{B0 + 1} 1 {B0 + 3} 2 {B0 + 5} 1"
    assert _charged_once(redis_client, 5, stored) == (5 - 3 - 1, after)
    # Live pairs out of order: read whole, rewritten in the order read.
    stored, after = f"{B0 + 3} 1 {B0 + 1} 1", f"{B0 + 3} 1 {B0 + 1} 1 {B0 + 5} 1"
    assert _charged_once(redis_client, 5, stored) == (5 - 2 - 1, after)


def test_a_bucket_written_twice_counts_twice_and_both_are_charged(redis_client: Any) -> None:
    stored, after = f"{B0 + 5} 1 {B0 + 5} 1", f"{B0 + 5} 2 {B0 + 5} 2"  # as it always was
    assert _charged_once(redis_client, 5, stored) == (5 - 2 - 1, after)


def test_a_bucket_ahead_of_the_clock_still_counts(redis_client: Any) -> None:
    # Redis' clock went back (a failover to a replica a little behind): the newer
    # bucket's requests still count, and the charge goes to the clock's bucket, one
    # pair a bucket.
    stored, after = f"{B0 + 3} 1 {B0 + 5} 2", f"{B0 + 3} 2 {B0 + 5} 2"
    assert _charged_once(redis_client, 3, stored) == (5 - 3 - 1, after)


def test_a_denial_waits_for_the_oldest_buckets_whatever_their_order(redis_client: Any) -> None:
    now = EPOCH_US + 5 * STEP_US
    for value in (f"{B0 + 1} 2 {B0 + 3} 3", f"{B0 + 3} 3 {B0 + 1} 2"):
        clock = FakeClock(now)
        engine = fresh_engine(redis_client, clock)
        _store(redis_client, engine, value)
        decision = engine.check([Check(IP, [LIMIT])])
        assert not decision.allowed
        # One request more than the limit: the 2 of bucket B0 + 1 must slide out first,
        # which they do when the window has left bucket B0 + 1 + 10 behind.
        assert decision.retry_after_us == (B0 + 1 + 11) * STEP_US - now, value
        assert _stored(redis_client, engine) == value  # a denial charges nothing


def _each_stored(client: Any, engine: Any, limit: Limit, *expected: str) -> None:
    """One allowed request per value of ``expected``, each leaving that value stored."""
    for value in expected:
        assert engine.check([Check(IP, [limit])]).allowed
        assert _stored(client, engine, limit) == value


W0 = EPOCH_US // 1_000_000  # the 1 s window the clock starts in


def test_the_window_counter_keeps_its_window_and_the_previous_count(redis_client: Any) -> None:
    counter = Limit("api", Rate(5, 1), Algorithm.SLIDING_WINDOW_COUNTER)
    clock = FakeClock(EPOCH_US)
    engine = fresh_engine(redis_client, clock)
    _each_stored(redis_client, engine, counter, f"{W0} 1 0", f"{W0} 2 0")
    clock.advance(us=1_500_000)  # the next window: the 2 become the previous count
    decision = engine.check([Check(IP, [counter])])
    assert decision.allowed and decision.results[0].remaining == 5 - 1 - 1  # 2 weighted by 1/2
    assert _stored(redis_client, engine, counter) == f"{W0 + 1} 1 2"
    clock.advance(us=100_000)
    _each_stored(redis_client, engine, counter, f"{W0 + 1} 2 2")


def test_the_fixed_window_keeps_its_window_and_starts_the_next_one_at_the_charge(
    redis_client: Any,
) -> None:
    fixed = Limit("api", Rate(5, 1), Algorithm.FIXED_WINDOW)
    clock = FakeClock(EPOCH_US)
    engine = fresh_engine(redis_client, clock)
    _each_stored(redis_client, engine, fixed, f"{W0} 1", f"{W0} 2")
    clock.advance(us=1_000_000)
    decision = engine.check([Check(IP, [fixed])])
    assert decision.allowed and decision.results[0].remaining == 4
    assert _stored(redis_client, engine, fixed) == f"{W0 + 1} 1"


def test_a_steady_client_never_grows_the_stored_buckets_past_one_window(
    redis_client: Any,
) -> None:
    # What a client can do to the value: send requests. However long it keeps doing so,
    # the buckets that slid out are dropped on the next write, so a check never reads
    # more than the window's buckets and the one being charged.
    clock = FakeClock(EPOCH_US)
    engine = fresh_engine(redis_client, clock)
    most = 0
    for _ in range(300):  # 30 windows, a request every 40 ms (at most 3 a bucket)
        engine.check([Check(IP, [LIMIT])])
        most = max(most, len(_stored(redis_client, engine).split()) // 2)
        clock.advance(us=40_000)
    assert most <= 11


def test_a_stored_value_that_is_no_number_reads_as_absent(redis_client: Any) -> None:
    """A limit's field that is not a number, however it got there (a hand edit, another
    program), is read as no state: the check passes with the full quota and writes a
    value of its own; it never fails the call (which would let the policy's failure
    mode decide every request of that identity)."""
    for algorithm in (
        Algorithm.FIXED_WINDOW,
        Algorithm.SLIDING_WINDOW,
        Algorithm.SLIDING_WINDOW_COUNTER,
        Algorithm.TOKEN_BUCKET,
        Algorithm.GCRA,
    ):
        limit = Limit("api", Rate(5, 1), algorithm)
        for value in ("garbage", "", "x 12", "12 x", "12 x 3"):
            engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
            redis_client.hset(engine.keys.of(IP).state, limit.spec, value)
            decision = engine.check([Check(IP, [limit])])
            assert decision.allowed, (algorithm, value)
            assert decision.results[0].remaining == 4, (algorithm, value)
            assert _stored(redis_client, engine, limit) not in ("", value), (algorithm, value)
