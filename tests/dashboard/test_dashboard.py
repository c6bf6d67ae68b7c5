"""The offender dashboard through the test client, on real Redis (standalone and cluster).

A scripted sequence of requests goes through the middleware from known IPs and
users; the pages must then show exactly those identities, users, policies and
counts, and the actions must change what the engine decides.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any
from urllib.parse import urlencode

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import AbstractBaseUser
from django.test import Client, override_settings
from django.urls import reverse

from django_ratelimits.dashboard.forms import MAX_PAGE
from django_ratelimits.engine import Check, Identity, Limit, get_engine
from django_ratelimits.engine.controls import Controls
from django_ratelimits.engine.offenders import SCAN_LIMIT
from django_ratelimits.models import Policy
from django_ratelimits.offenders import Action, Offenders, Operation, UnknownPolicy
from django_ratelimits.offenders.text import duration, parse_span, span
from django_ratelimits.policies import current
from django_ratelimits.rates import parse_rates
from django_ratelimits.testing import FakeClock

PAGE = "admin:django_ratelimits_offenders"
JSON = "admin:django_ratelimits_offenders_json"
DETAIL = "admin:django_ratelimits_offender"
ACTION = "admin:django_ratelimits_offender_action"

OFFICE = "198.51.100.10"  # alice and bob behind one address
ATTACKER = "203.0.113.99"  # anonymous, over the "other" policy
QUIET = "192.0.2.1"  # carol, never denied
V6 = "2001:db8::5"  # grouped by /64


def policies() -> None:
    Policy.objects.create(
        name="hello",
        rates="3/m",
        algorithm="sliding_log",
        key="ip_and_user",
        path="^/api/hello",
        record_metadata="every",
    )
    Policy.objects.create(
        name="other",
        rates="2/m",
        # Not fixed_window: its count starts again at each minute, which a slow
        # test run can cross between the requests that should be denied.
        algorithm="gcra",
        key="ip",
        path="^/api/other",
        record_metadata="every",
    )
    current().refresh()


def hit(path: str, ip: str, user: AbstractBaseUser | None = None, times: int = 1) -> list[int]:
    client = Client(REMOTE_ADDR=ip)
    if user is not None:
        client.force_login(user)
    return [client.get(path).status_code for _ in range(times)]


def scripted(django_user_model: Any) -> dict[str, Any]:
    """The sequence; returns the users. Expected offenders:

    ip:198.51.100.10  3 denials by hello; alice x4 and bob x2 behind it
    user:<alice>      1 denial by hello, from the office IP
    ip:203.0.113.99   3 denials by other; anonymous x6 behind it
    ip:2001:db8::/64  1 denial by other
    """
    policies()
    alice = django_user_model.objects.create_user("alice", password="x")
    bob = django_user_model.objects.create_user("bob", password="x")
    carol = django_user_model.objects.create_user("carol", password="x")
    assert hit("/api/hello", OFFICE, alice, 3) == [200, 200, 200]
    assert hit("/api/hello", OFFICE, bob, 2) == [429, 429]  # the IP is full; bob is not
    assert hit("/api/hello", OFFICE, alice) == [429]  # both the IP and alice are full
    assert hit("/api/other", ATTACKER, times=5) == [200, 200, 429, 429, 429]
    assert hit("/api/hello", ATTACKER) == [200]
    assert hit("/api/hello", QUIET, carol) == [200]
    assert hit("/api/other", V6, times=3) == [200, 200, 429]
    return {"alice": alice, "bob": bob, "carol": carol}


def expected(users: dict[str, Any]) -> dict[str, tuple[int, dict[str, int]]]:
    return {
        f"ip:{OFFICE}": (3, {"hello": 3}),
        f"user:{users['alice'].pk}": (1, {"hello": 1}),
        f"ip:{ATTACKER}": (3, {"other": 3}),
        "ip:2001:db8::/64": (1, {"other": 1}),
    }


def idents(page: str) -> list[str]:
    return re.findall(r'<tr class="offender[^"]*" data-ident="([^"]+)"', page)


def data(client: Client, **query: Any) -> dict[str, Any]:
    response = client.get(reverse(JSON), query)
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/json"
    return json.loads(response.content)  # type: ignore[no-any-return]


def detail_url(kind: str, value: str) -> str:
    return f"{reverse(DETAIL)}?{urlencode({'kind': kind, 'value': value})}"


def act(client: Client, **fields: Any) -> Any:
    """Ask, then confirm, as the detail page's form and the confirmation page post."""
    asked = client.post(reverse(ACTION), fields)
    assert asked.status_code == 200 and b'id="confirm-action"' in asked.content
    return client.post(reverse(ACTION), {**fields, "confirm": "on"})


def remaining(identity: Identity, policy: str) -> list[int]:
    spec = current().get(policy)
    assert spec is not None
    return [r.remaining for r in get_engine().peek([Check(identity, spec.limits)]).results]


@pytest.fixture
def board(site_redis: Any, django_user_model: Any, admin_client: Client) -> dict[str, Any]:
    return {"users": scripted(django_user_model), "client": admin_client, "redis": site_redis}


@pytest.fixture
def frozen_board(
    frozen_clock: FakeClock, site_redis: Any, django_user_model: Any, admin_client: Client
) -> dict[str, Any]:
    """The board scripted on the test clock: every request in one second of it, so the
    seconds left that a page shows (an allow-listing's 3600) and the activity chart's
    seconds do not move however slow the machine."""
    return {"users": scripted(django_user_model), "client": admin_client, "redis": site_redis}


# --------------------------------------------------------------------------- the list


def test_the_page_lists_exactly_the_denied_identities(board: dict[str, Any]) -> None:
    client, users = board["client"], board["users"]
    response = client.get(reverse(PAGE))
    assert response.status_code == 200
    page = response.content.decode()
    assert sorted(idents(page)) == sorted(expected(users))
    assert "4 identities denied in the last hour." in page
    assert 'id="offenders-table"' in page and 'id="offender-filters"' in page
    assert 'class="breadcrumbs"' in page
    got = {o["ident"]: (o["denials"], o["by_policy"]) for o in data(client)["offenders"]}
    assert got == expected(users)


def test_the_users_behind_an_ip_and_the_ip_behind_a_user(board: dict[str, Any]) -> None:
    client, users = board["client"], board["users"]
    alice, bob = users["alice"], users["bob"]
    rows = {o["ident"]: o for o in data(client)["offenders"]}
    office = rows[f"ip:{OFFICE}"]
    assert office["behind"] == [
        {"who": f"user:{alice.pk}", "count": 4, "name": f"alice (user {alice.pk})"},
        {"who": f"user:{bob.pk}", "count": 2, "name": f"bob (user {bob.pk})"},
    ]
    assert rows[f"ip:{ATTACKER}"]["behind"] == [{"who": "user:-", "count": 6, "name": "anonymous"}]
    assert rows[f"user:{alice.pk}"]["behind"] == [
        {"who": f"ip:{OFFICE}", "count": 4, "name": OFFICE}
    ]
    assert rows[f"user:{alice.pk}"]["name"] == f"alice (user {alice.pk})"
    page = client.get(reverse(PAGE)).content.decode()
    assert f'alice (user {alice.pk})</a> <span class="rl-count">\u00d74</span>' in page


def test_the_json_has_the_documented_fields(frozen_board: dict[str, Any]) -> None:
    body = data(frozen_board["client"])
    assert set(body) == {
        "now_ms",
        "period",
        "order",
        "shadow",
        "page",
        "per_page",
        "has_next",
        "total",
        "offenders",
        "activity",
        "errors",
        "error",
        "html",
    }
    assert (body["period"], body["order"], body["page"], body["total"]) == (3600, "last", 1, 4)
    assert body["error"] is None and body["errors"] == {}
    row = next(o for o in body["offenders"] if o["ident"] == f"ip:{ATTACKER}")
    assert set(row) == {
        "ident",
        "label",
        "kind",
        "value",
        "name",
        "first_ms",
        "last_ms",
        "denials",
        "by_policy",
        "behind",
        "override",
        "recent",
        "detail_url",
        "stale",
    }
    assert (row["kind"], row["value"], row["override"]) == ("ip", ATTACKER, None)
    assert row["first_ms"] <= row["last_ms"] <= body["now_ms"]
    assert row["recent"] == {"hits": 6, "denied": 3, "would_deny": 0}
    assert row["detail_url"] == detail_url("ip", ATTACKER)
    assert body["activity"]["seconds"] == 60 and len(body["activity"]["hits"]) == 60
    # Every request once, though alice's are in her list and in the office IP's.
    assert (sum(body["activity"]["hits"]), sum(body["activity"]["denied"])) == (15, 7)
    assert set(body["html"]) == {
        "offenders-summary",
        "offenders-chart",
        "offenders-body",
        "offenders-pagination",
    }
    assert body["html"]["offenders-body"].startswith('<tbody id="offenders-body">')
    assert f'data-ident="ip:{ATTACKER}"' in body["html"]["offenders-body"]
    assert "<svg" in body["html"]["offenders-chart"]


def test_filters(board: dict[str, Any]) -> None:
    client, users = board["client"], board["users"]
    alice = users["alice"]

    def shown(**query: Any) -> set[str]:
        response = client.get(reverse(PAGE), query)
        assert response.status_code == 200
        assert {o["ident"] for o in data(client, **query)["offenders"]} == set(
            idents(response.content.decode())
        )
        return set(idents(response.content.decode()))

    assert shown(policy="other") == {f"ip:{ATTACKER}", "ip:2001:db8::/64"}
    assert shown(policy="hello") == {f"ip:{OFFICE}", f"user:{alice.pk}"}
    assert shown(kind="user") == {f"user:{alice.pk}"}
    assert shown(ip="198.51.100.0/24") == {f"ip:{OFFICE}"}
    assert shown(ip="::ffff:198.51.100.0/120") == {f"ip:{OFFICE}"}  # as IPv4 (198.51.100.0/24)
    assert shown(ip=ATTACKER) == {f"ip:{ATTACKER}"}
    assert shown(ip="2001:db8::/32") == {"ip:2001:db8::/64"}
    # An address pasted from a log finds the group it is counted in.
    assert shown(ip="2001:db8::5") == shown(ip="2001:db8::/80") == {"ip:2001:db8::/64"}
    assert shown(ip="10.0.0.0/8") == set()
    assert shown(ip="198.51.100.0/24", policy="other") == set()
    assert shown(user="alice") == {f"user:{alice.pk}"}  # by user name
    assert shown(user=str(alice.pk)) == {f"user:{alice.pk}"}  # or by id
    assert shown(user="bob") == set()  # never denied
    assert shown(user="alice", policy="other") == set()


def test_the_user_filter_finds_what_a_deleted_user_triggered(board: dict[str, Any]) -> None:
    """A deleted spam account: Redis still names ``user:<id>``, and staff look it up by
    that id (the filter refused it: it needed the user to exist)."""
    client, users = board["client"], board["users"]
    pk, carol_pk = str(users["alice"].pk), str(users["carol"].pk)
    users["alice"].delete()
    users["carol"].delete()  # never denied
    gone = f"user {pk} (no longer exists)"
    response = client.get(reverse(PAGE), {"user": pk})
    assert response.status_code == 200
    page = response.content.decode()
    assert idents(page) == [f"user:{pk}"]
    assert f"No user has the id {pk} (deleted, or never created)" in page
    assert gone in page and 'id="offenders-user-gone"' in page
    body = data(client, user=pk, kind="user")
    assert body["errors"] == {} and [o["name"] for o in body["offenders"]] == [gone]
    assert 'id="offenders-user-gone"' in body["html"]["offenders-summary"]
    assert idents(client.get(reverse(PAGE), {"user": carol_pk}).content.decode()) == []
    # Named on the other rows too: the office IP's "seen with", her row unfiltered.
    rows = {o["ident"]: o for o in data(client)["offenders"]}
    assert rows[f"user:{pk}"]["name"] == gone
    assert rows[f"ip:{OFFICE}"]["behind"][0] == {"who": f"user:{pk}", "count": 4, "name": gone}
    assert 'id="offenders-user-gone"' not in client.get(reverse(PAGE)).content.decode()
    # Her username was never counted; garbage and an id no key can hold are no user's:
    # a form error next to the field (the filter left out), never a 500.
    for bad in ("alice", "not a user", "9" * 23, "-1e3", "4 2"):
        response = client.get(reverse(PAGE), {"user": bad})
        assert response.status_code == 200
        page = response.content.decode()
        assert "No user has this id or username (a deleted user is found by its id)." in page
        assert len(idents(page)) == 4 and 'id="offenders-user-gone"' not in page
        assert data(client, user=bad)["errors"]["user"][0]["code"] == "no_user"
    assert data(client, user="4\x002")["errors"]["user"][0]["code"] == "null_characters_not_allowed"
    # With an IP filter as well, the conflict leaves the user out and says nothing of it.
    page = client.get(reverse(PAGE), {"user": pk, "ip": OFFICE}).content.decode()
    assert "Filter by IP or by user, not both." in page and "offenders-user-gone" not in page


def test_bad_filters_are_shown_and_left_out(board: dict[str, Any]) -> None:
    client = board["client"]
    response = client.get(reverse(PAGE), {"ip": "not-an-ip", "period": "7", "order": "x"})
    assert response.status_code == 200
    page = response.content.decode()
    assert "Enter an IP address or a network" in page
    assert len(idents(page)) == 4  # the defaults apply
    response = client.get(reverse(PAGE), {"ip": OFFICE, "user": "alice"})
    assert "Filter by IP or by user, not both." in response.content.decode()
    assert len(idents(response.content.decode())) == 4
    assert data(client, kind="user", ip=OFFICE)["errors"]["__all__"][0]["code"] == "conflict"


def test_period_leaves_out_older_offenders(board: dict[str, Any]) -> None:
    client, redis = board["client"], board["redis"]
    client.get(reverse(PAGE))  # records what this process refused itself (docs/flood.md)
    # Make the attacker's last denial two hours old, in its record and its index.
    keys = get_engine().keys.of(Identity("ip", ATTACKER))
    old = int(time.time() * 1000) - 2 * 3600 * 1000
    redis.hset(keys.record, "last", old)
    redis.zadd(keys.index, {keys.ident: old})
    assert f"ip:{ATTACKER}" not in idents(client.get(reverse(PAGE)).content.decode())
    assert len(idents(client.get(reverse(PAGE), {"period": 300}).content.decode())) == 3
    assert f"ip:{ATTACKER}" in idents(client.get(reverse(PAGE), {"period": 86400}).content.decode())


def test_sort_order(board: dict[str, Any], django_user_model: Any) -> None:
    client = board["client"]
    # The indexes take a new score at most once a second per identity: wait one,
    # then the attacker's next denials put it first by both orders.
    time.sleep(1.05)
    assert hit("/api/other", ATTACKER, times=2) == [429, 429]
    by_denials = data(client, order="denials")["offenders"]
    assert (by_denials[0]["ident"], by_denials[0]["denials"]) == (f"ip:{ATTACKER}", 5)
    assert data(client, order="last")["offenders"][0]["ident"] == f"ip:{ATTACKER}"


def test_pagination(site_redis: Any, admin_client: Client) -> None:
    policies()
    for n in range(30):
        assert hit("/api/other", f"203.0.113.{n}", times=3)[-1] == 429
    first = admin_client.get(reverse(PAGE)).content.decode()
    assert len(idents(first)) == 25
    assert "Page 1 of 2" in first and 'class="rl-next"' in first and "rl-previous" not in first
    second = admin_client.get(reverse(PAGE), {"page": 2}).content.decode()
    assert len(idents(second)) == 5 and 'class="rl-previous"' in second and "rl-next" not in second
    assert not set(idents(first)) & set(idents(second))
    assert data(admin_client)["has_next"] is True
    assert data(admin_client, page=2)["has_next"] is False
    # Pages reach as deep as filters look, no deeper.
    assert (data(admin_client, page=999)["page"], MAX_PAGE) == (200, SCAN_LIMIT // 25)
    # Filtered pages cannot count the matches: they say whether there is a next one.
    filtered = admin_client.get(reverse(PAGE), {"ip": "203.0.113.0/24", "page": 2})
    assert len(idents(filtered.content.decode())) == 5
    assert "Page 2</span>" in filtered.content.decode()


# --------------------------------------------------------------------------- the detail


def test_the_detail_of_an_ip(board: dict[str, Any]) -> None:
    client, users = board["client"], board["users"]
    alice, bob = users["alice"], users["bob"]
    response = client.get(detail_url("ip", OFFICE))
    assert response.status_code == 200
    page = response.content.decode()
    assert "Users behind this IP" in page
    assert re.findall(r'<tr class="behind" data-who="([^"]+)"', page) == [
        f"user:{alice.pk}",
        f"user:{bob.pk}",
    ]
    assert len(re.findall(r'<tr class="hit rl-allowed">', page)) == 3
    assert len(re.findall(r'<tr class="hit rl-denied">', page)) == 3
    assert "GET /api/hello" in page
    assert 'id="offender-denials">3<' in page
    # Quotas: the IP used all 3 of hello, none of other.
    quotas = dict(
        re.findall(
            r'<tr class="quota[^"]*" data-policy="(\w+)".*?rl-remaining">([^<]+)<', page, re.S
        )
    )
    assert {name: quotas.pop(name, None) for name in ("hello", "other")} == {
        "hello": "0 of 3",
        "other": "2 of 2",
    }
    # Any policy another test's module declared in this process is shown untouched.
    assert all(left == full for left, full in (q.split(" of ") for q in quotas.values()))
    assert 'id="action-reset"' in page and 'id="action-block"' in page
    assert 'id="action-lift"' not in page  # nothing to lift
    assert "<svg" in page


def test_the_detail_of_a_user_lists_its_ips(board: dict[str, Any]) -> None:
    client, alice = board["client"], board["users"]["alice"]
    page = client.get(detail_url("user", str(alice.pk))).content.decode()
    assert "IPs of this user" in page
    assert re.findall(r'<tr class="behind" data-who="([^"]+)"', page) == [f"ip:{OFFICE}"]
    assert f'href="{detail_url("ip", OFFICE).replace("&", "&amp;")}"' in page
    quotas = re.findall(
        r'data-policy="(\w+)"', page.split('id="quota-table"')[1].split("</table>")[0]
    )
    assert quotas == ["hello"]  # "other" counts IPs only


def test_the_detail_shows_a_bounded_part_of_a_long_list(
    site_redis: Any, admin_client: Client
) -> None:
    from django.conf import settings

    limit = Limit("wide", parse_rates("1000/m")[0])
    office = Identity("ip", OFFICE)
    config = {**settings.DJANGO_RATELIMITS, "METADATA_MAX_ENTRIES": 300}
    with override_settings(DJANGO_RATELIMITS=config):
        for n in range(250):  # one request each: one call's checks of an identity are one hit
            check = Check(office, [limit], metadata=f"user:{n}|GET /x", record_every=True)
            assert get_engine().check([check]).allowed
        page = admin_client.get(detail_url("ip", OFFICE)).content.decode()
    assert len(re.findall(r'<tr class="behind"', page)) == 100
    assert "150 more not shown." in page
    assert len(re.findall(r'<tr class="hit ', page)) == 200
    assert "50 older hits not shown." in page


def test_an_identity_never_seen_has_a_page(board: dict[str, Any]) -> None:
    page = board["client"].get(detail_url("ip", "192.0.2.77")).content.decode()
    assert "none recorded" in page
    response = board["client"].get(reverse(DETAIL), {"kind": "Bad Kind", "value": "x"})
    assert response.status_code == 404
    assert "&#x27;Bad Kind&#x27; is not a kind of identity" in response.content.decode()
    assert board["client"].get(reverse(DETAIL), {"kind": "ip"}).status_code == 404


# --------------------------------------------------------------------------- actions


def logged(admin: Any) -> list[str]:
    """What admin's history says was done: the sentence alone, no object to link to."""
    entries = LogEntry.objects.filter(user=admin).order_by("pk")
    assert all(e.content_type is None and e.get_admin_url() is None for e in entries)
    assert all(e.object_repr == e.change_message for e in entries)
    return [e.change_message for e in entries]


def test_reset_all_forgets_the_identity(board: dict[str, Any], admin_user: Any) -> None:
    client = board["client"]
    office = Identity("ip", OFFICE)
    assert remaining(office, "hello") == [0]
    response = act(client, kind="ip", value=OFFICE, action="reset", policy="", forget="on")
    assert response.status_code == 302 and response["Location"] == detail_url("ip", OFFICE)
    message = client.get(response["Location"]).content.decode()
    assert "Reset rate-limit counters of ip:" in message and "none recorded" in message
    assert remaining(office, "hello") == [3]
    assert f"ip:{OFFICE}" not in idents(client.get(reverse(PAGE)).content.decode())
    assert logged(admin_user) == [
        f"Reset rate-limit counters of ip:{OFFICE} (all policies) and forgot its offender record"
    ]
    assert hit("/api/hello", OFFICE) == [200]


def test_reset_one_policy_keeps_the_record(board: dict[str, Any], admin_user: Any) -> None:
    client = board["client"]
    attacker = Identity("ip", ATTACKER)
    assert (remaining(attacker, "other"), remaining(attacker, "hello")) == ([0], [2])
    act(client, kind="ip", value=ATTACKER, action="reset", policy="other")
    assert (remaining(attacker, "other"), remaining(attacker, "hello")) == ([2], [2])
    assert f"ip:{ATTACKER}" in idents(client.get(reverse(PAGE)).content.decode())
    assert logged(admin_user) == [f"Reset rate-limit counters of ip:{ATTACKER} (policy other)"]


def test_a_reset_under_a_policy_no_longer_enabled_is_refused_and_changes_nothing(
    board: dict[str, Any],
) -> None:
    """A confirmation posted after its policy was disabled must not forget the
    identity's record while resetting no counter, and then report it done."""
    attacker = Identity("ip", ATTACKER)
    reset = Operation(Action.RESET, attacker, policy="gone", forget=True)
    with pytest.raises(UnknownPolicy, match="no enabled policy is named 'gone'"):
        Offenders().perform(reset)
    assert remaining(attacker, "other") == [0]
    assert f"ip:{ATTACKER}" in idents(board["client"].get(reverse(PAGE)).content.decode())


@pytest.mark.parametrize(
    ("seconds", "words", "short"),
    [
        (0, "0 s", "0s"),
        (59, "59 s", "59s"),
        (3600, "1 h", "1h"),
        (3661, "1 h 1 min", "1h 1m"),
        (86_400 + 3 * 3600 + 59, "1 d 3 h", "1d 3h"),
        (7 * 86_400, "7 d", "7d"),
    ],
)
def test_pages_and_the_terminal_tell_a_duration_in_the_same_two_largest_units(
    seconds: int, words: str, short: str
) -> None:
    assert (duration(seconds), span(seconds)) == (words, short)
    if seconds and " " not in short:
        assert parse_span(short) == seconds


@pytest.mark.parametrize("typed", ["", "1", "h", "0s", "1.5h", "-1h", "1e3s", "123456789s", "1hh"])
def test_a_span_that_is_not_a_positive_number_and_one_unit_is_refused(typed: str) -> None:
    with pytest.raises(ValueError):
        parse_span(typed)


def test_block_allow_and_lift(frozen_board: dict[str, Any], admin_user: Any) -> None:
    client = frozen_board["client"]
    response = act(client, kind="ip", value=QUIET, action="block", seconds="300")
    assert response.status_code == 302
    assert hit("/api/hello", QUIET) == [429]  # blocked, though under its limits
    rows = {o["ident"]: o for o in data(client)["offenders"]}
    assert rows[f"ip:{QUIET}"]["override"]["state"] == "blocked"
    assert 295 <= rows[f"ip:{QUIET}"]["override"]["seconds"] <= 300
    assert rows[f"ip:{QUIET}"]["by_policy"] == {"!blocked": 1}
    page = client.get(detail_url("ip", QUIET)).content.decode()
    assert "blocked, 5 min left" in page or "blocked, 4 min" in page
    assert 'id="action-lift"' in page

    act(client, kind="ip", value=QUIET, action="lift")
    assert Controls(get_engine()).override(Identity("ip", QUIET)) is None
    assert hit("/api/hello", QUIET) == [200]

    act(client, kind="ip", value=ATTACKER, action="allow", seconds="3600")
    assert hit("/api/other", ATTACKER, times=3) == [200, 200, 200]  # over its limit, let through
    assert Controls(get_engine()).override(Identity("ip", ATTACKER)) == ("allowed", 3600, 0)
    assert logged(admin_user) == [
        f"Blocked ip:{QUIET} for 5 minutes",
        f"Lifted the block or allow-listing of ip:{QUIET}",
        f"Allow-listed ip:{ATTACKER} for 1 hour",
    ]


def test_a_block_needs_a_duration(board: dict[str, Any]) -> None:
    client = board["client"]
    response = client.post(reverse(ACTION), {"kind": "ip", "value": QUIET, "action": "block"})
    assert response.status_code == 302
    assert "Choose how long." in client.get(response["Location"]).content.decode()
    assert Controls(get_engine()).override(Identity("ip", QUIET)) is None
    bad = client.post(reverse(ACTION), {"kind": "", "value": "", "action": "lift"})
    assert bad.status_code == 400


def test_the_confirmation_page_says_what_will_happen(board: dict[str, Any]) -> None:
    response = board["client"].post(
        reverse(ACTION), {"kind": "ip", "value": OFFICE, "action": "block", "seconds": "86400"}
    )
    page = response.content.decode()
    assert "Are you sure?" in page and "24 hours" in page and 'id="confirm-yes"' in page
    assert '<input type="hidden" name="seconds" value="86400">' in page
    assert Controls(get_engine()).override(Identity("ip", OFFICE)) is None  # not yet


# --------------------------------------------------------------------------- Redis down


def test_redis_down_shows_an_error_not_a_500(redis_down: None, admin_client: Client) -> None:
    response = admin_client.get(reverse(PAGE))
    assert response.status_code == 200
    assert "Could not read the offenders from Redis" in response.content.decode()
    body = admin_client.get(reverse(JSON))
    assert body.status_code == 503
    assert "Could not read the offenders from Redis" in json.loads(body.content)["error"]
    detail = admin_client.get(detail_url("ip", OFFICE))
    assert detail.status_code == 200
    assert "Could not read this identity from Redis" in detail.content.decode()
    done = admin_client.post(
        reverse(ACTION), {"kind": "ip", "value": OFFICE, "action": "lift", "confirm": "on"}
    )
    assert done.status_code == 302
    assert "Nothing was done: Redis failed" in admin_client.get(done["Location"]).content.decode()
    assert not LogEntry.objects.exists()


# --------------------------------------------------------------------------- admin wiring


def test_offenders_is_listed_beside_the_policies_on_the_index_and_in_the_sidebar(
    site_redis: Any, admin_client: Client
) -> None:
    entry = reverse("admin:django_ratelimits_offenderdashboard_changelist")
    for url in (
        reverse("admin:index"),
        reverse("admin:app_list", args=["django_ratelimits"]),
        reverse("admin:django_ratelimits_policy_changelist"),  # the sidebar
        reverse(PAGE),  # the sidebar too
    ):
        page = admin_client.get(url).content.decode()
        assert f'<a href="{entry}">Offenders</a>' in page, url
    assert (
        f'href="{reverse(PAGE)}" id="offenders-link"'
        in admin_client.get(reverse("admin:django_ratelimits_policy_changelist")).content.decode()
    )
    opened = admin_client.get(entry)
    assert opened.status_code == 302 and opened["Location"] == reverse(PAGE)
    for refused in (f"{entry}add/", f"{entry}1/change/"):  # an entry, not a model to edit
        assert admin_client.get(refused).status_code == 404
    page = admin_client.get(reverse(PAGE)).content.decode()
    assert "django_ratelimits/dashboard.js" in page and "django_ratelimits/dashboard.css" in page
    assert "<script>" not in page.split("</head>")[1]  # no inline script in the body


def test_shadow_hits_are_not_offences_and_show_apart(
    frozen_clock: Any, admin_client: Client
) -> None:
    """An address only a shadow-mode policy caught is no offender; it is listed
    under its own filter, and its page says "would have been denied"."""
    Policy.objects.create(name="enf", rates="5/m", path="^/api/")
    Policy.objects.create(name="watch", rates="1/m", path="^/api/hello", mode="shadow")
    current().refresh()
    visitor = Client(REMOTE_ADDR="192.0.2.11")
    assert [visitor.get("/api/hello").status_code for _ in range(4)] == [200] * 4
    assert data(admin_client)["offenders"] == []
    assert data(admin_client)["total"] == 0
    shadowed = data(admin_client, shown="shadow")
    (row,) = shadowed["offenders"]
    assert (shadowed["shadow"], row["value"], row["denials"]) == (True, "192.0.2.11", 3)
    assert row["by_policy"] == {"watch": 3}
    assert row["recent"] == {"hits": 3, "denied": 0, "would_deny": 3}
    page = admin_client.get(detail_url("ip", "192.0.2.11")).content.decode()
    assert "none recorded (never denied, expired, or forgotten)" in page
    assert '<dd id="offender-shadow">3 ' in page
    assert page.count("<em>would have been denied</em>") == 3
    assert "watch (would have denied)" in page


def test_the_shadow_ledger_does_not_say_that_refused_requests_were_let_through(
    frozen_clock: Any, admin_client: Client
) -> None:
    """Requests an enforced policy refused, which a shadow-mode policy would have denied
    too, are in both ledgers: the shadow ledger must not say they were let through."""
    Policy.objects.create(name="enf", rates="1/m", path="^/api/")
    Policy.objects.create(name="watch", rates="1/m", path="^/api/hello", mode="shadow")
    current().refresh()
    visitor = Client(REMOTE_ADDR="192.0.2.12")
    assert [visitor.get("/api/hello").status_code for _ in range(3)] == [200, 429, 429]
    (row,) = data(admin_client, shown="shadow")["offenders"]
    assert row["denials"] == 2
    detail = admin_client.get(detail_url("ip", "192.0.2.12")).content.decode()
    listing = admin_client.get(reverse(PAGE), {"shown": "shadow"}).content.decode()
    assert "let through" not in detail + listing
    assert "(shadow mode: these policies refused nothing)" in detail
    assert "(shadow mode refuses nothing: not offenders)" in listing


def test_the_summary_says_how_far_pages_reach_for_shadow_hits_too(
    site_redis: Any, admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django_ratelimits.dashboard.views import offenders as offenders_view

    monkeypatch.setattr(offenders_view, "MAX_PAGE", 1)  # pages reach the first 25
    Policy.objects.create(name="enf", rates="1/m", path="^/api/other")
    Policy.objects.create(name="watch", rates="1/m", path="^/api/hello", mode="shadow")
    current().refresh()
    for n in range(26):
        assert hit("/api/other", f"203.0.113.{n}", times=2) == [200, 429]
        assert hit("/api/hello", f"203.0.113.{n}", times=2) == [200, 200]
    note = "Pages reach the first 25: filter to find the others."
    for shown in ({}, {"shown": "shadow"}):
        summary = admin_client.get(reverse(PAGE), shown).content.decode()
        assert "26 identities" in summary and note in summary, shown
