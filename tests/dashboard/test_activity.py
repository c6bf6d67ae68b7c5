"""The offenders page's activity chart (dashboard.present.page_activity): each request
counted once, whichever rows list it and however its entries' times fall.

A request from a user behind an IP has an entry in both identities' lists. On a
cluster they are written by two script calls, one after the other, so their times
differ by a millisecond or more: the chart must not count such a request in two
seconds when a second turns between its calls.
"""

from __future__ import annotations

from django_ratelimits.dashboard.present import SAME_REQUEST_MS, page_activity
from django_ratelimits.engine import Identity
from django_ratelimits.engine.hits import ALLOWED, DENIED, Hit
from django_ratelimits.engine.offenders import Offender
from django_ratelimits.offenders import Row

NOW_MS = 1_800_000_000_000
IP, USER = "ip:203.0.113.7", "user:42"
PATH = "GET /api/items"


def row(ident: str, *hits: Hit) -> Row:
    kind, _, value = ident.partition(":")
    offender = Offender(ident, ident, NOW_MS - 60_000, NOW_MS, len(hits))
    return Row(offender, Identity(kind, value), tuple(hits), None)


def both(ip_at: list[int], user_at: list[int], outcome: str = ALLOWED) -> tuple[Row, Row]:
    """The IP's row (its entries name the user) and the user's (naming the IP), with
    entries ``ip_at`` and ``user_at`` milliseconds before now."""
    return (
        row(IP, *(Hit(USER, PATH, NOW_MS - ago, outcome) for ago in ip_at)),
        row(USER, *(Hit(IP, PATH, NOW_MS - ago, outcome) for ago in user_at)),
    )


def test_a_request_whose_two_calls_fall_either_side_of_a_second_counts_once() -> None:
    """The IP's entry 1,000 ms old (second 1), the user's 999 ms (second 0): one request.
    Counted per second alone, the chart drew it in both seconds."""
    chart = page_activity(both([1_000], [999], DENIED), NOW_MS)
    assert (sum(chart.hits), sum(chart.denied)) == (1, 1)
    assert chart.hits[-2:] == (1, 0)  # in the IP's second


def test_requests_listed_by_both_rows_count_once_at_any_offset_within_the_bound() -> None:
    ip_at = [100, 2_400, 2_999, 7_000, 30_000]
    for offset in (0, 1, -1, 40, -40, SAME_REQUEST_MS, -SAME_REQUEST_MS):
        chart = page_activity(both(ip_at, [at + offset for at in ip_at]), NOW_MS)
        assert sum(chart.hits) == 5, offset


def test_entries_further_apart_than_the_bound_are_two_requests() -> None:
    chart = page_activity(both([1_000], [1_000 - SAME_REQUEST_MS - 1]), NOW_MS)
    assert sum(chart.hits) == 2


def test_a_list_recording_only_denials_beside_one_recording_every_hit() -> None:
    """The user's list holds every hit, the IP's only the denied one (another policy's
    recording): 3 requests, 1 denied; the IP's entry is matched to its own request, the
    nearest, not to the allowed one a few milliseconds before it."""
    ip = row(IP, Hit(USER, PATH, NOW_MS - 1_000, DENIED))
    user = row(
        USER,
        Hit(IP, PATH, NOW_MS - 1_010, ALLOWED),
        Hit(IP, PATH, NOW_MS - 999, ALLOWED),  # the IP's policy denied it, the user's not
        Hit(IP, PATH, NOW_MS - 5_000, ALLOWED),
    )
    chart = page_activity([ip, user], NOW_MS)
    assert (sum(chart.hits), sum(chart.denied)) == (3, 1)


def test_one_row_alone_counts_its_entries() -> None:
    chart = page_activity([both([1_000, 1_001, 59_999], [])[0]], NOW_MS)
    assert sum(chart.hits) == 3
    assert chart.hits[0] == 1 and chart.hits[-2] == 2


def test_entries_outside_the_minute_are_left_out() -> None:
    chart = page_activity(both([60_000, 70_000, 0], [60_001, 0]), NOW_MS)
    assert sum(chart.hits) == 1
