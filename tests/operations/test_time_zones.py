"""Expiries and times under every time-zone setting: ``USE_TZ = False`` (the database
holds ``TIME_ZONE``'s naive wall times), ``USE_TZ = True`` with a zone off UTC by a
half or three quarters of an hour, and clocks that change for daylight saving time
between an expiry's setting and its end. A block must not lift early (a quiet way
through), nor last hours longer; a page must not fail; a time shown must be the one
the workers act on."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.conf import settings
from django.test import Client, override_settings
from django.urls import reverse
from django.utils import timezone
from django.utils.formats import date_format

from django_ratelimits.engine import Identity
from django_ratelimits.identity import parse_address
from django_ratelimits.models import BlockedNetwork, Policy, RateOverride
from django_ratelimits.offenders import Offenders
from django_ratelimits.policies import get_registry
from tests.engine_helpers import EPOCH_US
from tests.operations.test_command import run, run_json

pytestmark = pytest.mark.django_db

NEW_YORK, KOLKATA, CHATHAM = "America/New_York", "Asia/Kolkata", "Pacific/Chatham"


def at(zone: str, *fields: int, fold: int = 0) -> float:
    """The instant a clock in ``zone`` shows as ``fields`` (year, month, day, hour and
    minute), in seconds since the epoch; ``fold=1`` the second time it shows them."""
    year, month, day, hour, minute = (*fields, 0)[:5]
    return datetime(year, month, day, hour, minute, tzinfo=ZoneInfo(zone), fold=fold).timestamp()


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Callable[[float], None]:
    """Stop the site's clocks at an instant: the registry's wall clock, and
    ``timezone.now()`` as Django answers then (aware in UTC, or naive in ``TIME_ZONE``)."""

    def stop(instant: float) -> None:
        def now() -> datetime:
            aware = datetime.fromtimestamp(instant, tz=UTC)
            return aware if settings.USE_TZ else timezone.make_naive(aware)

        monkeypatch.setattr(get_registry(), "wall_clock", lambda: instant)
        monkeypatch.setattr(timezone, "now", now)

    return stop


def zone(name: str, use_tz: bool) -> Any:
    return override_settings(TIME_ZONE=name, USE_TZ=use_tz)


# (zone, USE_TZ, the instant the command runs, for how long): across the clock changes.
SPANS = [
    # A day from noon the day before New York's clocks go forward: 23 hours of
    # wall-time arithmetic, an hour early.
    (NEW_YORK, False, at(NEW_YORK, 2025, 3, 8, 12), "1d", 86400),
    # A day from noon the day before they go back: 25 hours, an hour late.
    (NEW_YORK, False, at(NEW_YORK, 2025, 11, 1, 12), "1d", 86400),
    # 30 minutes from 1:10 the second time the clocks show it: 1:40 read as the first
    # 1:40, an hour before the command ran. The entry blocked nothing.
    (NEW_YORK, False, at(NEW_YORK, 2025, 11, 2, 1, 10, fold=1), "30m", 1800),
    (CHATHAM, False, at(CHATHAM, 2025, 4, 6, 3, 0), "2h", 7200),
    (KOLKATA, False, at(KOLKATA, 2025, 7, 1, 23, 50), "20m", 1200),
    (NEW_YORK, True, at(NEW_YORK, 2025, 3, 8, 12), "1d", 86400),
    (KOLKATA, True, at(KOLKATA, 2025, 7, 1, 23, 50), "20m", 1200),
    (CHATHAM, True, at(CHATHAM, 2025, 4, 6, 3, 0), "2h", 7200),
]
SPAN_IDS = [
    "new-york-naive-day-before-spring",
    "new-york-naive-day-before-fall",
    "new-york-naive-in-the-repeated-hour",
    "chatham-naive-across-fall",
    "kolkata-naive",
    "new-york-aware-day-before-spring",
    "kolkata-aware",
    "chatham-aware-across-fall",
]


@pytest.mark.parametrize(("name", "use_tz", "start", "span", "seconds"), SPANS, ids=SPAN_IDS)
def test_a_network_blocked_for_a_while_is_blocked_exactly_that_long(
    clock: Callable[[float], None], name: str, use_tz: bool, start: float, span: str, seconds: int
) -> None:
    registry, address = get_registry(), parse_address("203.0.113.9")
    assert address is not None
    with zone(name, use_tz):
        clock(start)
        run("block-network", "203.0.113.0/24", "--for", span)
        registry.refresh()
        [entry] = registry.blocklist.entries
        assert entry.expires_at == start + seconds
        assert registry.blocked(address) is not None
        [shown] = run_json("networks")["networks"]
        assert shown["in_force"] is True
        # What the command shows is that instant, its offset said.
        assert datetime.fromisoformat(shown["expires_at"]).timestamp() == start + seconds
        clock(start + seconds - 1)
        assert registry.blocked(address) is not None
        clock(start + seconds)
        assert registry.blocked(address) is None


@pytest.mark.parametrize(("name", "use_tz", "start", "span", "seconds"), SPANS, ids=SPAN_IDS)
def test_an_override_from_the_terminal_lasts_exactly_its_time(
    clock: Callable[[float], None], name: str, use_tz: bool, start: float, span: str, seconds: int
) -> None:
    registry, me = get_registry(), Identity("ip", "198.51.100.4")
    with zone(name, use_tz):
        clock(start)
        Policy.objects.create(name="api", rates="2/h", path="^/api/")
        made = run_json("override", "ip:198.51.100.4", "api", "5/h", "--for", span, "--reason", "x")
        assert datetime.fromisoformat(made["expires_at"]).timestamp() == start + seconds
        registry.refresh()
        [listed] = run_json("overrides")["overrides"]
        assert listed["in_force"] is True
        clock(start + seconds - 1)
        assert registry.own_limits("api", me) is not None
        clock(start + seconds)
        assert registry.own_limits("api", me) is None


def test_overrides_load_by_time_zone_of_the_database_not_of_the_request(
    clock: Callable[[float], None],
) -> None:
    """With ``USE_TZ = False`` the rows hold ``TIME_ZONE``'s wall times. A refresh runs
    within a request, which may have activated the user's time zone (Kolkata: 9 h 30
    ahead of New York in July): now in that zone made every override ending in the
    next 9 h 30 look expired, and none of them applied."""
    registry, me = get_registry(), Identity("ip", "198.51.100.4")
    start = at(NEW_YORK, 2025, 7, 1, 12)
    with zone(NEW_YORK, False):
        clock(start)
        api = Policy.objects.create(name="api", rates="2/h", path="^/api/")
        RateOverride.objects.create(
            policy=api,
            identity_kind="ip",
            identity_value="198.51.100.4",
            rates="5/h",
            expires_at=datetime(2025, 7, 1, 15, 0),  # 3 hours on, New York's wall time
            reason="x",
        )
        with timezone.override(ZoneInfo(KOLKATA)):
            registry.refresh()
        assert registry.own_limits("api", me) is not None
        clock(at(NEW_YORK, 2025, 7, 1, 15))
        assert registry.own_limits("api", me) is None


def test_in_the_repeated_hour_admin_says_in_force_what_the_workers_enforce(
    clock: Callable[[float], None], admin_client: Client
) -> None:
    """With ``USE_TZ = False``, 1:30 on the night New York's clocks go back is two
    instants; the workers read the later, so that a block typed for then never lifts
    an hour early. At 1:40 the first time, admin's lists compared wall times, said
    *not in force*, and the network stayed blocked for 50 minutes more."""
    registry, address = get_registry(), parse_address("203.0.113.9")
    assert address is not None
    with zone(NEW_YORK, False):
        clock(at(NEW_YORK, 2025, 11, 2, 1, 0))
        BlockedNetwork.objects.create(network="203.0.113.0/24", expires_at=_REPEATED)
        Policy.objects.create(name="api", rates="2/h", path="^/api/")
        RateOverride.objects.create(
            policy=Policy.objects.get(),
            identity_kind="ip",
            identity_value="203.0.113.9",
            rates="5/h",
            expires_at=_REPEATED,
            reason="x",
        )
        registry.refresh()
        for now, enforced in [
            (at(NEW_YORK, 2025, 11, 2, 1, 40), True),  # the first 1:40
            (at(NEW_YORK, 2025, 11, 2, 1, 29, fold=1), True),
            (at(NEW_YORK, 2025, 11, 2, 1, 30, fold=1), False),
        ]:
            clock(now)
            assert (registry.blocked(address) is not None) is enforced
            assert (registry.own_limits("api", Identity("ip", "203.0.113.9")) is not None) is (
                enforced
            )
            for model in ("blockednetwork", "rateoverride"):
                url = reverse(f"admin:django_ratelimits_{model}_changelist")
                column = admin_client.get(url).content.decode().split('class="field-in_force"')[1]
                assert column.split('alt="')[1].startswith(str(enforced))


_REPEATED = datetime(2025, 11, 2, 1, 30)  # New York shows it at 5:30 UTC, then at 6:30


@pytest.mark.parametrize(
    ("name", "use_tz", "stored"),
    [
        (NEW_YORK, False, datetime(2025, 7, 1, 12, 0)),
        (KOLKATA, True, datetime(2025, 7, 1, 6, 30, tzinfo=UTC)),
    ],
)
def test_the_policy_list_shows_when_each_policy_changed(
    admin_client: Client, name: str, use_tz: bool, stored: datetime
) -> None:
    """Its *updated* column gave ``localtime()`` the naive time of ``USE_TZ = False``:
    the list of policies was a 500."""
    with zone(name, use_tz):
        Policy.objects.create(name="api", rates="2/h", path="^/api/")
        Policy.objects.update(updated_at=stored)
        page = admin_client.get(reverse("admin:django_ratelimits_policy_changelist"))
        assert page.status_code == 200
        shown = page.content.decode().split('<td class="field-updated">')[1].split("</td>")[0]
        # noon in the site's time zone; the attribute says which instant that is
        assert 'title="July 1, 2025, noon">07/01/2025<' in shown
        attribute = shown.split('datetime="')[1].split('"')[0]
        assert datetime.fromisoformat(attribute) == datetime(2025, 7, 1, 12, tzinfo=ZoneInfo(name))


@pytest.mark.parametrize(
    ("name", "use_tz"), [(NEW_YORK, False), (KOLKATA, False), (KOLKATA, True), (CHATHAM, True)]
)
def test_the_blocks_page_shows_when_each_block_ends_in_the_sites_time(
    site_redis: Any, frozen_clock: Any, admin_client: Client, name: str, use_tz: bool
) -> None:
    """Redis' times, shown in UTC with ``USE_TZ = False``: hours off beside every other
    time admin shows, with nothing to say so."""
    Offenders().block(Identity("ip", "203.0.113.7"), 300, by="ops")
    ends = datetime.fromtimestamp(EPOCH_US / 1e6 + 300, tz=ZoneInfo(name))
    with zone(name, use_tz):
        page = admin_client.get(reverse("admin:django_ratelimits_blocks")).content.decode()
    assert (
        f'<time datetime="{ends.isoformat()}">{date_format(ends, "DATETIME_FORMAT")}</time>' in page
    )
