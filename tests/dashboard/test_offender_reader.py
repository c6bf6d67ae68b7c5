"""The dashboard's data layer after a scripted sequence of requests."""

from __future__ import annotations

from typing import Any

import pytest

from django_ratelimits.engine import Algorithm, Check, Engine, Identity, KeySpace, Limit
from django_ratelimits.engine.controls import Controls
from django_ratelimits.engine.offenders import SCAN_LIMIT, OffenderReader
from django_ratelimits.rates import parse_rates
from django_ratelimits.testing import FakeClock
from tests.engine_helpers import EPOCH_US, fresh_engine

LOGIN = [Limit("login", r, Algorithm.SLIDING_LOG) for r in parse_rates("2/m")]
API = [Limit("api", r, Algorithm.FIXED_WINDOW) for r in parse_rates("3/m")]


def request(engine: Any, ip: str, user: str | None, limits: list[Limit]) -> bool:
    checks = [
        Check(
            Identity("ip", ip),
            limits,
            metadata=f"user:{user or '-'}|POST /login",
            record_every=True,
        )
    ]
    if user:
        checks.append(
            Check(
                Identity("user", user), limits, metadata=f"ip:{ip}|POST /login", record_every=True
            )
        )
    return engine.check(checks).allowed


def scripted(redis_client: Any) -> tuple[Any, FakeClock]:
    """A shared IP with two users, a lone attacker, and a quiet client."""
    clock = FakeClock(EPOCH_US)
    engine = fresh_engine(redis_client, clock)
    for n in range(6):  # alice and bob behind one office IP
        request(engine, "198.51.100.10", "alice" if n % 2 else "bob", LOGIN)
        clock.advance(1.5)
    for _ in range(10):  # an anonymous attacker
        request(engine, "203.0.113.99", None, LOGIN + API)
        clock.advance(1.5)
    request(engine, "192.0.2.1", "carol", LOGIN)  # never denied
    return engine, clock


def test_the_page_lists_exactly_the_denied_identities(redis_client: Any) -> None:
    engine, _ = scripted(redis_client)
    page = OffenderReader(engine).page(period=300)
    got = {o.label: (o.denials, o.by_policy) for o in page.offenders}
    assert got == {
        "ip:198.51.100.10": (4, {"login": 4}),
        "user:alice": (1, {"login": 1}),
        "user:bob": (1, {"login": 1}),
        "ip:203.0.113.99": (8, {"login": 8}),
    }
    assert page.total == 4
    assert page.offenders[0].label == "ip:203.0.113.99"  # newest first


def test_pages_sort_by_denials_filter_and_paginate(redis_client: Any) -> None:
    engine, _ = scripted(redis_client)
    reader = OffenderReader(engine)
    ranked = reader.page(period=300, order="denials")
    assert [o.label for o in ranked.offenders][:2] == ["ip:203.0.113.99", "ip:198.51.100.10"]
    assert {o.label for o in reader.page(period=300, kind="user").offenders} == {
        "user:alice",
        "user:bob",
    }
    assert reader.page(period=300, policy="api").offenders == ()
    first, second = reader.page(period=300, limit=3), reader.page(period=300, offset=3, limit=3)
    assert len(first.offenders) == 3 and len(second.offenders) == 1
    assert not {o.ident for o in first.offenders} & {o.ident for o in second.offenders}


def test_the_period_leaves_out_older_offenders(redis_client: Any) -> None:
    engine, clock = scripted(redis_client)
    clock.advance(600)
    assert OffenderReader(engine).page(period=300).offenders == ()
    assert len(OffenderReader(engine).page(period=3600).offenders) == 4


def test_an_ip_detail_tells_which_users_were_behind_it(redis_client: Any) -> None:
    engine, clock = scripted(redis_client)
    detail = OffenderReader(engine).detail(Identity("ip", "198.51.100.10"))
    assert sorted(detail.behind()) == [("user:alice", 3), ("user:bob", 3)]
    assert [h.allowed for h in reversed(detail.hits)] == [True, True] + [False] * 4
    assert detail.hits[0].what == "POST /login"
    assert detail.override is None
    user = OffenderReader(engine).detail(Identity("user", "alice"))
    assert user.behind() == [("ip:198.51.100.10", 3)]
    per_second = detail.per_second(clock.now_us() // 1000, seconds=60)
    assert sum(per_second) == 6 and len(per_second) == 60


def test_an_unknown_identity_has_an_empty_detail(redis_client: Any) -> None:
    engine, _ = scripted(redis_client)
    detail = OffenderReader(engine).detail(Identity("ip", "192.0.2.250"))
    assert detail.offender is None and detail.hits == () and detail.override is None


def test_the_detail_shows_a_block(redis_client: Any) -> None:
    engine, _ = scripted(redis_client)
    Controls(engine).block(Identity("ip", "203.0.113.99"), 120)
    detail = OffenderReader(engine).detail(Identity("ip", "203.0.113.99"))
    assert detail.override == ("blocked", 120, 0)


def test_identities_that_print_alike_are_told_apart(redis_client: Any) -> None:
    """Values equal in their first 200 characters, or apart only in characters that
    cannot be printed, are different identities: the page must not show them as one
    identity in two rows (an outsider chooses a header's value)."""
    clock = FakeClock(EPOCH_US)
    engine = fresh_engine(redis_client, clock)
    lookalikes = ["k" * 300 + "1", "k" * 300 + "2", "key\x00one", "key\x01one"]
    for value in lookalikes:
        check = [Check(Identity("header", value), LOGIN)]
        for _ in range(3):  # 2/m: the third is denied
            engine.check(check)
    labels = [o.label for o in OffenderReader(engine).page(period=300).offenders]
    assert len(labels) == 4
    assert len(set(labels)) == 4
    for shown in labels:
        assert shown.isprintable() and len(shown) < 250
    assert "header:" + "k" * 193 in labels[0] + labels[1] + labels[2] + labels[3]


def test_sorted_by_denials_a_short_period_lists_its_offenders(redis_client: Any) -> None:
    """The most denied identities of the day may all be older than the period asked for:
    the page must still list the period's offenders, most denied first."""
    clock = FakeClock(EPOCH_US)
    engine = fresh_engine(redis_client, clock)
    daily = [Limit("api", r, Algorithm.FIXED_WINDOW) for r in parse_rates("1/d")]

    def denied(ip: str, times: int) -> None:
        for _ in range(times + 1):  # the first is let through
            engine.check([Check(Identity("ip", ip), daily)])
            clock.advance(1.1)  # the count index takes a new score at most once a second

    shard = engine.keys.of(Identity("ip", "203.0.113.7")).tag
    busy = [f"10.0.{n // 256}.{n % 256}" for n in range(5000)]
    busy = [ip for ip in busy if engine.keys.of(Identity("ip", ip)).tag == shard][:30]
    for ip in busy:  # this morning's busy offenders, on the same shard
        denied(ip, 3)
    clock.advance(2 * 3600)
    denied("203.0.113.7", 1)
    denied("203.0.113.8", 2)

    reader = OffenderReader(engine)
    page = reader.page(period=300, order="denials", limit=26)
    assert page.total == 2
    assert [o.label for o in page.offenders] == ["ip:203.0.113.8", "ip:203.0.113.7"]
    whole_day = reader.page(period=86_400, order="denials", limit=3)
    assert [o.denials for o in whole_day.offenders] == [3, 3, 3]


def test_most_denied_over_the_retention_passes_over_entries_older_than_the_period(
    redis_client: Any,
) -> None:
    # Entries past the retention wait in a shard's indexes until a denial there trims
    # them: sorted by denials over the retention, they must not fill the page in place
    # of the period's own offenders (a review: "1 denied" above an empty table).
    clock = FakeClock(EPOCH_US)
    engine = fresh_engine(redis_client, clock)
    tight = [Limit("tight", r, Algorithm.FIXED_WINDOW) for r in parse_rates("1/h")]
    for n in range(60):
        for _ in range(4):
            engine.check([Check(Identity("ip", f"198.51.100.{n}"), tight)])
    clock.advance(25 * 3600)  # past the retention (24 h)
    for _ in range(2):
        engine.check([Check(Identity("ip", "203.0.113.77"), tight)])
    page = OffenderReader(engine).page(period=86400, order="denials", limit=10)
    assert (page.total, [o.label for o in page.offenders]) == (1, ["ip:203.0.113.77"])


def _sharded(redis_client: Any, prefix: str, shards: int) -> tuple[Engine, KeySpace, FakeClock]:
    """An engine of ``shards`` shards on a stopped clock."""
    clock = FakeClock(EPOCH_US)
    space = KeySpace(prefix=prefix, shards=shards)
    return Engine(redis_client, keys=space, clock=clock), space, clock


def _indexed(redis_client: Any, space: KeySpace, count: int, denials: int, at_ms: int) -> None:
    """``count`` index entries in shard 0 as the check script writes them (each
    ``denials`` times denied, the newest last denied at ``at_ms``, one a ms before the
    next), without their records: a flood the trims have not reached."""
    pipe = redis_client.pipeline(transaction=False)
    for n in range(count):
        ident = f"ip:10.{n // 65536}.{n // 256 % 256}.{n % 256}"
        pipe.zadd(space.index(0), {ident: at_ms - n})
        pipe.zadd(space.count_index(0), {ident: denials})
    pipe.execute()


def test_most_denied_over_the_retention_after_more_stale_entries_than_the_scan(
    redis_client: Any,
) -> None:
    # More aged-out entries in a shard than the scan reads (a flood a day ago, each
    # denial since trimming 100): the page is read by time instead, never left empty.
    clock = FakeClock(EPOCH_US)
    engine = Engine(redis_client, keys=KeySpace(prefix="stale", shards=1), clock=clock)
    tight = [Limit("tight", r, Algorithm.FIXED_WINDOW) for r in parse_rates("1/h")]
    space = engine.keys
    _indexed(redis_client, space, SCAN_LIMIT + 200, 2, EPOCH_US // 1000)
    clock.advance(25 * 3600)  # past the retention (24 h)
    for _ in range(2):
        engine.check([Check(Identity("ip", "203.0.113.77"), tight)])
    page = OffenderReader(engine).page(period=86400, order="denials", limit=10)
    assert (page.total, [o.label for o in page.offenders]) == (1, ["ip:203.0.113.77"])


_TIGHT = [Limit("tight", r, Algorithm.FIXED_WINDOW) for r in parse_rates("1/h")]


def _in_shard(space: KeySpace, shard: int, prefix: str, count: int = 60) -> list[Identity]:
    """The first ``count`` addresses ``<prefix>.a.b`` whose keys are in ``shard``."""
    found = []
    for a in range(1, 255):
        for b in range(1, 255):
            identity = Identity("ip", f"{prefix}.{a}.{b}")
            if space.of(identity).index == space.index(shard):
                found.append(identity)
                if len(found) >= count:
                    return found
    return found


@pytest.mark.parametrize(
    ("flood", "denials", "burst", "others"),
    [(50, 5, False, 60), (2, 20, True, 20)],
    ids=["below-the-flood", "one-burst"],
)
def test_a_cut_shard_s_most_denied_leads_though_another_shard_fills_the_page(
    redis_client: Any, flood: int, denials: int, burst: bool, others: int
) -> None:
    # Shard 0: a day-old flood deeper than the scan, each entry denied ``flood`` times,
    # then X, denied ``denials`` times (a second and a half apart, or in one burst: the
    # count index follows every denial). Shard 1: ``others`` identities denied once or
    # thrice, which fill the page. X, the most denied of the period, must lead it: found
    # below the flood by the read by time, or above it by the scan.
    engine, space, clock = _sharded(redis_client, "cut", 2)
    _indexed(redis_client, space, SCAN_LIMIT + 2000, flood, EPOCH_US // 1000)
    clock.advance(25 * 3600)
    x = _in_shard(space, 0, "203.0")[0]
    for _ in range(denials + 1):
        engine.check([Check(x, _TIGHT)])
        clock.advance(0 if burst else 1.5)
    for identity in _in_shard(space, 1, "198.51", others):
        for _ in range(4 if burst else 2):
            engine.check([Check(identity, _TIGHT)])
            clock.advance(1.5)
    page = OffenderReader(engine).page(period=86400, order="denials", limit=10)
    top = page.offenders[0]
    assert (top.label, top.denials) == (f"ip:{x.value}", denials), [
        (o.label, o.denials) for o in page.offenders[:3]
    ]


def test_a_kind_filter_over_the_retention_keeps_its_most_denied_after_stale_entries(
    redis_client: Any,
) -> None:
    # One shard: alice (5 denials, 2 h ago), then 5,000 IPs denied once each in the
    # last seconds, and 100 aged-out entries left (a quiet day's flood). By denials over
    # the retention, kind user: the count index's scan finds alice; the page is short
    # only because the filter keeps one row, and the 5,000 newest read by time must be
    # added to what the scan found, never replace it.
    engine, space, clock = _sharded(redis_client, "kindcut", 1)
    for n in range(600):  # alice's 5 index writes trim 500 of them
        redis_client.zadd(space.index(0), {f"ip:192.0.2.{n}": EPOCH_US // 1000})
        redis_client.zadd(space.count_index(0), {f"ip:192.0.2.{n}": 1000})
    clock.advance(25 * 3600)
    alice = Identity("user", "alice")
    for _ in range(6):
        engine.check([Check(alice, _TIGHT)])
        clock.advance(1.5)
    clock.advance(2 * 3600)
    now_ms = clock.now_us() // 1000
    _indexed(redis_client, space, SCAN_LIMIT, 1, now_ms)
    page = OffenderReader(engine).page(period=86400, order="denials", limit=50, kind="user")
    assert [o.label for o in page.offenders] == ["user:alice"]


def test_a_burst_offender_ranks_first_by_denials_over_the_retention(redis_client: Any) -> None:
    # X is denied 20 times within one second (a burst, then nothing); ten others are
    # denied 3 times each, a few seconds apart. Over the retention, by denials, X leads.
    engine, _, clock = _sharded(redis_client, "burst", 1)
    x = Identity("ip", "203.0.113.5")
    for _ in range(21):
        engine.check([Check(x, _TIGHT)])
    for n in range(10):
        for _ in range(4):
            engine.check([Check(Identity("ip", f"198.51.100.{n}"), _TIGHT)])
            clock.advance(1.5)
    page = OffenderReader(engine).page(period=86400, order="denials", limit=5)
    shorter = OffenderReader(engine).page(period=3600, order="denials", limit=5)
    assert shorter.offenders[0].label == "ip:203.0.113.5"  # by time, ranked by records
    assert [(o.label, o.denials) for o in page.offenders][:1] == [("ip:203.0.113.5", 20)], [
        (o.label, o.denials) for o in page.offenders
    ]


def test_paging_by_denials_lists_every_offender_once(redis_client: Any) -> None:
    # Shard 0: a day-old flood deeper than the scan (count 2 each). Shard 1: fifteen
    # identities denied 3 times each, and X, denied 20 times in one burst. Pages of 10
    # by denials over the retention must list the sixteen offenders once each.
    engine, space, clock = _sharded(redis_client, "cutpages", 2)
    _indexed(redis_client, space, SCAN_LIMIT + 2000, 2, EPOCH_US // 1000)
    clock.advance(25 * 3600)
    x, *others = _in_shard(space, 1, "203.0", 16)
    for _ in range(21):
        engine.check([Check(x, _TIGHT)])
    for identity in others:
        for _ in range(4):
            engine.check([Check(identity, _TIGHT)])
            clock.advance(1.5)
    reader = OffenderReader(engine)
    seen = [
        o.label
        for offset in (0, 10)
        for o in reader.page(period=86400, order="denials", offset=offset, limit=10).offenders
    ]
    want = {f"ip:{i.value}" for i in (x, *others)}
    twice = sorted({s for s in seen if seen.count(s) > 1})
    assert (len(seen), twice, sorted(want - set(seen))) == (16, [], []), f"X=ip:{x.value}"
