"""Acting only on identities that can exist, the active-blocks page, admin's history
and the warning before staff block themselves: through the test client, on real Redis."""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.test import AsyncClient, Client
from django.urls import reverse

from django_ratelimits.engine import Identity, get_engine
from django_ratelimits.engine.controls import Controls
from django_ratelimits.models import Policy
from django_ratelimits.offenders import Offenders
from django_ratelimits.policies import current
from tests.dashboard.test_dashboard import ACTION, DETAIL, act, detail_url

pytestmark = pytest.mark.django_db
BLOCKS = "admin:django_ratelimits_blocks"


@pytest.fixture
def staff(site_redis: Any, admin_client: Client) -> Client:
    return admin_client


@pytest.mark.parametrize(
    ("kind", "value", "reason"),
    [
        ("ip", "garbage", "&#x27;garbage&#x27; is not an IP address or network"),
        ("user", "sim-roamer", "no user has the id or username &#x27;sim-roamer&#x27;"),
        # No user can have had this id (out of the key's range): not even a deleted one.
        ("user", "9" * 23, "no user has the id or username &#x27;" + "9" * 23 + "&#x27;"),
        ("header", "   ", "not only spaces"),
        ("device", "phone", "&#x27;device&#x27; is not a kind of identity"),
        # A network wider than the address group: acting on its first group alone
        # would report a network blocked while every other address gets through.
        ("ip", "203.0.113.0/24", "holds 256 address groups of /32"),
        ("ip", "2001:db8::/48", "holds 65,536 address groups of /64"),
    ],
)
def test_an_identity_no_request_could_be_has_no_page_and_no_action(
    staff: Client, kind: str, value: str, reason: str
) -> None:
    page = staff.get(reverse(DETAIL), {"kind": kind, "value": value})
    assert page.status_code == 404 and reason in page.content.decode()
    for confirm in ({}, {"confirm": "on"}):
        fields = {"kind": kind, "value": value, "action": "block", "seconds": "300", **confirm}
        refused = staff.post(reverse(ACTION), fields)
        assert refused.status_code == 400 and reason in refused.content.decode()
    assert Offenders().active().overrides == ()
    assert not LogEntry.objects.exists()


def test_a_user_is_named_by_username_or_id(staff: Client, django_user_model: Any) -> None:
    roamer = django_user_model.objects.create_user("sim-roamer")
    page = staff.get(detail_url("user", "sim-roamer"))
    assert page.status_code == 200 and f"user:{roamer.pk}" in page.content.decode()
    act(staff, kind="user", value="sim-roamer", action="block", seconds="300")
    assert Controls(get_engine()).override(Identity("user", str(roamer.pk))) is not None
    assert staff.get(detail_url("user", str(roamer.pk))).status_code == 200


def test_an_ipv6_address_means_its_64(staff: Client) -> None:
    act(staff, kind="ip", value="2001:db8:1:2::7", action="block", seconds="300")
    assert Controls(get_engine()).override(Identity("ip", "2001:db8:1:2::/64")) is not None


def test_the_active_blocks_page_lists_and_lifts(
    frozen_clock: Any, staff: Client, django_user_model: Any
) -> None:
    # On the test clock: "5 min" left is read in whole seconds, 4 min 59 s once a second
    # passed on Redis' clock.
    offenders = reverse("admin:django_ratelimits_offenders")
    assert reverse(BLOCKS) in staff.get(offenders).content.decode()
    assert "No block or allow-listing is in force." in staff.get(reverse(BLOCKS)).content.decode()
    act(staff, kind="ip", value="203.0.113.7", action="block", seconds="300")
    act(staff, kind="header", value="key-123", action="allow", seconds="3600")
    Offenders().block(Identity("ip", "192.0.2.9"), 60, by="ops (manage.py)")

    page = staff.get(reverse(BLOCKS)).content.decode()
    rows = page.split('<tr class="rl-block"')[1:]
    assert [r.split('data-ident="')[1].split('"')[0] for r in rows] == [
        "ip:192.0.2.9",  # soonest to end first
        "ip:203.0.113.7",
        "header:key-123",
    ]
    assert "ops (manage.py)" in rows[0] and "admin" in rows[1]
    assert "blocked" in rows[1] and "allow-listed" in rows[2] and "5 min" in rows[1]
    assert 'name="back" value="blocks"' in rows[1]

    asked = staff.post(
        reverse(ACTION), {"kind": "ip", "value": "203.0.113.7", "action": "lift", "back": "blocks"}
    )
    assert 'name="back" value="blocks"' in asked.content.decode()
    done = act(staff, kind="ip", value="203.0.113.7", action="lift", back="blocks")
    assert done.status_code == 302 and done["Location"] == reverse(BLOCKS)
    listed = [o.label for o in Offenders().active().overrides]
    assert listed == ["ip:192.0.2.9", "header:key-123"]


def test_an_override_that_ended_leaves_the_page(site_redis: Any, frozen_clock: Any) -> None:
    service = Offenders()
    service.block(Identity("ip", "203.0.113.7"), 60)
    service.block(Identity("ip", "203.0.113.8"), 600)
    frozen_clock.advance(61)
    active = service.active()
    assert [o.label for o in active.overrides] == ["ip:203.0.113.8"] and active.total == 1
    keys = get_engine().keys
    index = keys.of(Identity("ip", "203.0.113.7")).override_index
    # An identity of the same shard: its block trims the shard's index.
    same_shard = (Identity("key", f"k{n}") for n in range(10_000))
    neighbour = next(i for i in same_shard if keys.of(i).override_index == index)
    service.block(neighbour, 60)
    assert b"ip:203.0.113.7" not in site_redis.zrange(index, 0, -1)


def test_admin_history_says_what_was_done_with_no_edit_link(staff: Client) -> None:
    act(staff, kind="ip", value="203.0.113.7", action="block", seconds="300")
    index = staff.get(reverse("admin:index")).content.decode()
    recent = index.split('id="recent-actions-module"')[1]
    assert "Blocked ip:203.0.113.7 for 5 minutes" in recent
    assert "Rate-limit policy" not in recent and "changelink" not in recent


@pytest.mark.parametrize(("kind", "own"), [("ip", "127.0.0.1"), ("user", None)])
def test_the_confirmation_warns_before_staff_block_themselves(
    staff: Client, admin_user: Any, kind: str, own: str | None
) -> None:
    value = own or str(admin_user.pk)
    fields = {"kind": kind, "value": value, "action": "block", "seconds": "300"}
    mine = staff.post(reverse(ACTION), fields).content.decode()
    assert 'id="confirm-own"' in mine and "the site will refuse your requests too" in mine
    other = staff.post(reverse(ACTION), {**fields, "value": "203.0.113.7" if own else "alice"})
    assert 'id="confirm-own"' not in other.content.decode()


@pytest.fixture
def everything_limited(site_redis: Any) -> None:
    """One policy on every path, as a site that limits its admin too."""
    Policy.objects.create(name="all", rates="1000/h", algorithm="gcra", key="ip", path="^/")
    current().refresh()


def test_staff_who_block_themselves_can_still_log_in_and_lift(
    everything_limited: None, admin_user: Any, caplog: pytest.LogCaptureFixture
) -> None:
    me = Client(REMOTE_ADDR="127.0.0.1")
    me.force_login(admin_user)
    act(me, kind="ip", value="127.0.0.1", action="block", seconds="300")
    with caplog.at_level(logging.INFO, logger="django_ratelimits"):
        assert Client(REMOTE_ADDR="127.0.0.1").get("/api/hello").status_code == 429
    assert "ip:127.0.0.1 is blocked (by staff or a ban) until " in caplog.text
    assert "over" not in caplog.text

    me.logout()
    assert me.get(reverse("admin:login")).status_code == 200
    back_in = me.post(reverse("admin:login"), {"username": "admin", "password": "password"})
    assert back_in.status_code == 302
    assert me.get(reverse(BLOCKS)).status_code == 200
    done = act(me, kind="ip", value="127.0.0.1", action="lift", back="blocks")
    assert done.status_code == 302 and Offenders().active().overrides == ()


@pytest.mark.django_db(transaction=True)
def test_the_way_back_holds_through_the_async_stack(
    everything_limited: None, admin_user: Any
) -> None:
    # Whether a staff user may lift blocks is a database question: under ASGI it must
    # be asked off the event loop, or the request fails instead of getting through.
    Offenders().block(Identity("ip", "127.0.0.1"), 300)

    async def visit() -> list[int]:
        staff = AsyncClient()  # from 127.0.0.1, the address blocked
        await staff.aforce_login(admin_user)
        return [(await staff.get(reverse(BLOCKS))).status_code for _ in range(2)]

    assert asyncio.run(visit()) == [200, 200]


def test_a_blocked_address_gets_no_more_logins_than_anyone(
    everything_limited: None, django_user_model: Any
) -> None:
    Policy.objects.create(
        name="login", rates="2/h", algorithm="sliding_log", key="ip", path="^/admin/login/"
    )
    current().refresh()
    Offenders().block(Identity("ip", "203.0.113.7"), 300)
    attacker = Client(REMOTE_ADDR="203.0.113.7")
    login = {"username": "admin", "password": "guess"}
    codes = [attacker.post(reverse("admin:login"), login).status_code for _ in range(3)]
    assert codes == [200, 200, 429]  # the login form answers, and its limit counts
    # Anywhere else the block holds, in admin too for anyone who may not lift it.
    assert attacker.get("/api/hello").status_code == 429
    assert attacker.get(reverse("admin:index")).status_code == 429
    helper = django_user_model.objects.create_user("helper", password="x", is_staff=True)
    attacker.force_login(helper)
    assert attacker.get(reverse(BLOCKS)).status_code == 429


def test_a_shadow_policy_on_a_blocked_address_refuses_nothing_and_logs_no_refusal(
    site_redis: Any, caplog: pytest.LogCaptureFixture
) -> None:
    Policy.objects.create(name="watch", rates="1000/h", path="^/api/hello", mode="shadow")
    current().refresh()
    ip = Identity("ip", "203.0.113.9")
    Offenders().block(ip, 300)
    with caplog.at_level(logging.INFO, logger="django_ratelimits"):
        assert Client(REMOTE_ADDR="203.0.113.9").get("/api/hello").status_code == 200
    assert "is blocked (by staff" not in caplog.text
    # What the block would have denied is a would-be denial, never an offence.
    keys = get_engine().keys.of(ip)
    assert not site_redis.exists(keys.record)
    assert site_redis.hget(keys.shadow_record, "d:!blocked") == b"1"


def test_a_block_no_policy_applies_says_so(staff: Client) -> None:
    """Blocking a header value while no enabled policy counts headers is done (a policy
    may come), and the page says it decides no request until then."""
    assert not current().counting("header")
    fields = {"kind": "header", "value": "LEAKED-KEY", "action": "block", "seconds": "3600"}
    asked = staff.post(reverse(ACTION), fields)
    assert b'id="confirm-idle"' in asked.content
    done = staff.post(reverse(ACTION), {**fields, "confirm": "on"}, follow=True)
    shown = [str(m) for m in done.context["messages"]]
    assert any("No enabled policy counts" in m for m in shown)
    asked = staff.post(reverse(ACTION), {**fields, "kind": "ip", "value": "203.0.113.7"})
    assert b'id="confirm-idle"' not in asked.content


def test_the_active_blocks_page_shows_a_page_at_a_time(staff: Client, frozen_clock: Any) -> None:
    """Bans on identities an attacker chooses can put tens of thousands of overrides in
    force: the page reads and renders one page of them, soonest to end first."""
    service = Offenders()
    for n in range(250):  # the n-th ends after n + 1 minutes
        service.block(Identity("header", f"key-{n:03d}"), 60 * (n + 1))
    first = staff.get(reverse(BLOCKS))
    rows = first.context["rows"]
    assert [r["override"].label for r in rows[:2]] == ["header:key-000", "header:key-001"]
    assert len(rows) == 100 and first.context["pages"] == 3
    page = first.content.decode()
    assert "250 in force." in page and f"{reverse(BLOCKS)}?page=2" in page
    last = staff.get(reverse(BLOCKS), {"page": "3"})
    labels = [r["override"].label for r in last.context["rows"]]
    assert labels == [f"header:key-{n:03d}" for n in range(200, 250)]
    assert last.context["next_url"] is None
    # Any other page is the first, or the deepest: "²" and "³" are digits to
    # str.isdigit() that int() refuses (a 500 before).
    for junk in ("0", "-1", "x", "9" * 40, "²", "1³", "\u0663"):
        assert staff.get(reverse(BLOCKS), {"page": junk}).status_code == 200


def test_a_block_set_before_the_address_prefix_changed_says_it_applies_to_no_one(
    staff: Client, settings: Any
) -> None:
    # Blocked as 203.0.113.7, then counted by /24: no request is counted as the blocked
    # identity any more. The page must not list it as a block like any other.
    Offenders().block(Identity("ip", "203.0.113.7"), 300, by="ops")
    Offenders().block(Identity("ip", "198.51.100.0/24"), 600, by="ops")  # as /24 counts
    settings.DJANGO_RATELIMITS = {**settings.DJANGO_RATELIMITS, "IPV4_PREFIX": 24}
    rows = staff.get(reverse(BLOCKS)).content.decode().split('<tr class="rl-block"')[1:]
    assert "ip:203.0.113.7" in rows[0] and "applies to no request" in rows[0]
    assert "ip:198.51.100.0/24" in rows[1] and "applies to no request" not in rows[1]


def test_a_lift_of_a_block_that_ended_meanwhile_is_not_reported_done(
    staff: Client, frozen_clock: Any
) -> None:
    # The block ends (or another admin lifts it) while staff read the confirmation:
    # nothing is lifted, so nothing is reported done nor written to admin's history.
    act(staff, kind="ip", value="203.0.113.9", action="block", seconds="300")
    frozen_clock.advance(301)
    done = act(staff, kind="ip", value="203.0.113.9", action="lift")
    page = staff.get(done["Location"]).content.decode()
    assert "Lifted the block" not in page
    assert "No block or allow-listing of ip:203.0.113.9 was in force" in page
    assert [e.change_message for e in LogEntry.objects.order_by("pk")] == [
        "Blocked ip:203.0.113.9 for 5 minutes"
    ]


def test_of_lifts_at_once_exactly_one_ends_the_block(site_redis: Any) -> None:
    # Two admins (or an admin and the command) lift one block together: one ended it,
    # the others are told nothing was in force (the override is read and deleted in
    # one script, never read first and deleted after).
    Offenders().block(Identity("ip", "203.0.113.9"), 300, by="ops")
    start = threading.Barrier(8)

    def lift() -> bool:
        start.wait()
        return Offenders().lift(Identity("ip", "203.0.113.9")) is not None

    with ThreadPoolExecutor(8) as pool:
        ended = list(pool.map(lambda _: lift(), range(8)))
    assert ended.count(True) == 1


def test_the_way_back_is_for_staff_who_can_reach_the_lift(
    everything_limited: None, django_user_model: Any
) -> None:
    # A lift needs view_offenders and block_offenders: staff with block_offenders
    # alone get 403 on the dashboard, so a block they cannot lift holds in admin too.
    Offenders().block(Identity("ip", "127.0.0.1"), 300)
    perms = Permission.objects.filter(content_type__app_label="django_ratelimits")
    blocker = django_user_model.objects.create_user("blocker", password="x", is_staff=True)
    blocker.user_permissions.set(perms.filter(codename="block_offenders"))
    client = Client(REMOTE_ADDR="127.0.0.1")
    client.force_login(blocker)
    assert client.get(reverse("admin:index")).status_code == 429
    assert client.get(reverse(BLOCKS)).status_code == 429
    lift = {"kind": "ip", "value": "127.0.0.1", "action": "lift", "confirm": "on"}
    assert client.post(reverse(ACTION), lift).status_code == 429
    lifter = django_user_model.objects.create_user("lifter", password="x", is_staff=True)
    lifter.user_permissions.set(perms.filter(codename__in=["view_offenders", "block_offenders"]))
    client.force_login(lifter)
    assert client.get(reverse(BLOCKS)).status_code == 200
    assert client.post(reverse(ACTION), lift).status_code == 302
    assert Offenders().active().overrides == ()


def test_a_block_admin_history_cannot_record_is_done_and_said_so(staff: Client) -> None:
    """The block is written to Redis before admin's history: a database failing at the
    history's row was a 500 after the block was in force, staff told nothing was done."""
    from django.db import OperationalError, connection

    def no_history(execute: Any, sql: str, *args: Any) -> Any:
        if "django_admin_log" in sql and sql.lstrip().upper().startswith("INSERT"):
            raise OperationalError("database is locked")
        return execute(sql, *args)

    fields = {"kind": "ip", "value": "203.0.113.7", "action": "block", "seconds": "3600"}
    with connection.execute_wrapper(no_history):
        done = staff.post(reverse(ACTION), {**fields, "confirm": "on"}, follow=True)
    assert done.status_code == 200
    shown = [str(m) for m in done.context["messages"]]
    assert any(m.startswith("Blocked ip:203.0.113.7") for m in shown)
    assert any("not written to admin's history" in m for m in shown)
    active = Offenders().active(0, 10)
    assert [(o.label, o.state) for o in active.overrides] == [("ip:203.0.113.7", "blocked")]
