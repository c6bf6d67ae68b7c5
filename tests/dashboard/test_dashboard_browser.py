"""The offender dashboard in real headless Chromium, as staff use it.

Screenshots of the page and of an identity's detail: see ``tests.dashboard.browsing``.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission, User

from django_ratelimits.engine import Algorithm, Check, Identity, Limit, get_engine
from django_ratelimits.models import Policy
from django_ratelimits.offenders import Offenders
from django_ratelimits.policies import get_registry
from django_ratelimits.rates import parse_rates
from django_ratelimits.testing import override_policies
from tests.dashboard.browsing import (
    IMAGES,
    OFFENDERS,
    PHONE,
    log_in,
    open_offenders,
    phone_width,
    tab,
)

LOGIN = [Limit("login", r, Algorithm.SLIDING_LOG) for r in parse_rates("2/m")]
API = [Limit("api", r, Algorithm.SLIDING_WINDOW) for r in parse_rates("5/m")]

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def traffic() -> None:
    """An office IP shared by three users, two attackers, one quiet client."""
    engine = get_engine()
    for n in range(9):
        user = ("alice", "bob", "carol")[n % 3]
        engine.check(
            [
                Check(Identity("ip", "203.0.113.5"), LOGIN, metadata=f"user:{user}|POST /login"),
                Check(Identity("user", user), LOGIN, metadata="ip:203.0.113.5|POST /login"),
            ]
        )
    for ip in ("198.51.100.7", "198.51.100.8"):
        for _ in range(8):
            engine.check([Check(Identity("ip", ip), LOGIN + API, metadata="user:-|GET /api/")])
    engine.check([Check(Identity("ip", "192.0.2.1"), API)])


def idents(page: Any) -> set[str]:
    return {row.get_attribute("data-ident") for row in page.query_selector_all("tr.offender")}


@pytest.mark.parametrize("redis_client", ["standalone"], indirect=True)
def test_staff_find_reset_and_lose_an_offender(site_redis: Any, page: Any) -> None:
    User.objects.create_superuser("boss", password="pw")
    traffic()
    open_offenders(page)
    assert idents(page) == {
        "ip:203.0.113.5",
        "user:alice",
        "user:bob",
        "user:carol",
        "ip:198.51.100.7",
        "ip:198.51.100.8",
    }
    page.screenshot(path=str(IMAGES / "dashboard.png"), full_page=True)

    page.fill("#id_ip", "198.51.100.0/24")
    with page.expect_navigation():
        page.click("#offender-filters-apply")
    assert idents(page) == {"ip:198.51.100.7", "ip:198.51.100.8"}

    page.goto(f"{page.base}{OFFENDERS}")
    page.click('tr.offender[data-ident="ip:203.0.113.5"] a.rl-detail-link')
    page.wait_for_selector("#offender-summary")
    behind = page.inner_text("#offender-behind")
    assert "alice" in behind and "bob" in behind and "carol" in behind
    page.screenshot(path=str(IMAGES / "identity.png"), full_page=True)

    page.click("#action-reset button[type=submit]")
    page.wait_for_selector("#confirm-yes")
    with page.expect_navigation():
        page.click("#confirm-yes")
    page.goto(f"{page.base}{OFFENDERS}")
    page.wait_for_selector("#offenders-table")
    assert "ip:203.0.113.5" not in idents(page)
    assert "ip:198.51.100.7" in idents(page)


@pytest.mark.parametrize("redis_client", ["standalone"], indirect=True)
def test_the_dashboard_fits_a_phone(site_redis: Any, browser: Any, live_server: Any) -> None:
    User.objects.create_superuser("boss", password="pw")
    traffic()
    width = phone_width(
        browser, live_server.url, OFFENDERS, "#offenders-table", "dashboard-phone.png"
    )
    assert width <= 400, "the page scrolls sideways on a phone"


# The identity page of the office address of traffic() at 390 px (7 recent hits, 3 users,
# 4 quotas): 2,563 px tall when its tables stacked each row as a card, 1,401 px with them
# kept as tables that scroll sideways. The bound leaves room for fonts and admin changes.
PHONE_HEIGHT_BOUND = 2000
# The policies whose quotas the page shows: those tests.urls declares. Pinned, because a
# worker that imported other test modules' views knows their declared policies too (a
# CI run saw the page at 2,005 px with them).
QUOTAS = ("t-login", "t-async", "t-soft", "t-cbv")


@pytest.mark.parametrize("redis_client", ["standalone"], indirect=True)
def test_the_identity_page_is_not_a_long_scroll_on_a_phone(
    site_redis: Any, browser: Any, live_server: Any
) -> None:
    User.objects.create_superuser("boss", password="pw")
    traffic()
    declared = [get_registry().declared(name) for name in QUOTAS]
    with (
        override_policies(*[spec for spec in declared if spec is not None]),
        tab(browser, live_server.url, PHONE) as phone,
    ):
        open_offenders(phone)
        phone.goto(f"{live_server.url}{OFFENDERS}identity/?kind=ip&value=203.0.113.5")
        phone.wait_for_selector("#offender-summary")
        height = phone.evaluate("document.documentElement.scrollHeight")
        width = phone.evaluate("document.documentElement.scrollWidth")
        hits = len(phone.query_selector_all("#hits-table tr.hit"))
        quotas = {row.get_attribute("data-policy") for row in phone.query_selector_all("tr.quota")}
        # The tables scroll sideways in their own box, never the page.
        overflowing = phone.evaluate(
            "[...document.querySelectorAll('.rl-table-wrap')]"
            ".filter(w => w.getBoundingClientRect().right > innerWidth + 1).length"
        )
        phone.screenshot(path=str(IMAGES / "identity-phone.png"), full_page=True)
    print(f"identity page at 390 px: {height} px tall, {width} px wide, {hits} hits")
    assert hits == 7  # the denials: record who is on denials by default
    assert quotas == set(QUOTAS)
    assert width <= 400 and overflowing == 0, "the page scrolls sideways on a phone"
    assert height < PHONE_HEIGHT_BOUND, f"the identity page is {height} px tall on a phone"


@pytest.mark.parametrize("redis_client", ["standalone"], indirect=True)
def test_people_without_the_permission_cannot_reach_it(site_redis: Any, page: Any) -> None:
    traffic()
    User.objects.create_user("visitor", password="pw")
    helper = User.objects.create_user("helper", password="pw", is_staff=True)
    helper.user_permissions.add(Permission.objects.get(codename="view_policy"))

    log_in(page, "visitor")
    assert page.url.startswith(f"{page.base}/admin/login/")
    assert "203.0.113.5" not in page.content()

    log_in(page, "helper")
    response = page.goto(f"{page.base}{OFFENDERS}")
    assert response.status == 403
    assert "203.0.113.5" not in page.content()
    json_response = page.goto(f"{page.base}{OFFENDERS}json/")
    assert json_response.status == 403


@pytest.mark.parametrize("redis_client", ["standalone"], indirect=True)
def test_a_garbage_identity_is_refused_with_the_reason(site_redis: Any, page: Any) -> None:
    User.objects.create_superuser("boss", password="pw")
    open_offenders(page)
    response = page.goto(f"{page.base}{OFFENDERS}identity/?kind=ip&value=garbage")
    assert response.status == 404
    assert "is not an IP address or network" in page.inner_text("#no-identity")
    assert page.query_selector("#offender-actions") is None


@pytest.mark.parametrize("redis_client", ["standalone"], indirect=True)
def test_staff_who_block_themselves_are_warned_and_can_log_in_and_lift(
    site_redis: Any, page: Any
) -> None:
    User.objects.create_superuser("boss", password="pw")
    Policy.objects.create(name="all", rates="1000/h", algorithm="gcra", key="ip", path="^/")
    get_registry().refresh()
    open_offenders(page)
    page.goto(f"{page.base}{OFFENDERS}identity/?kind=ip&value=127.0.0.1")
    page.select_option("#action-block select[name=seconds]", "300")
    page.click("#action-block button[type=submit]")
    page.wait_for_selector("#confirm-yes")
    assert "your own IP address" in page.inner_text("#confirm-own")
    with page.expect_navigation():
        page.click("#confirm-yes")

    page.context.clear_cookies()  # signed out, from a blocked address
    open_offenders(page)
    page.click("#offenders-blocks-link")
    page.wait_for_selector('tr.rl-block[data-ident="ip:127.0.0.1"]')
    page.click('tr.rl-block[data-ident="ip:127.0.0.1"] button[type=submit]')
    page.click("#confirm-yes")
    page.wait_for_selector("#blocks-empty")


@pytest.mark.parametrize("redis_client", ["standalone"], indirect=True)
def test_the_active_blocks_page_lists_and_lifts(
    site_redis: Any, page: Any, browser: Any, live_server: Any
) -> None:
    User.objects.create_superuser("boss", password="pw")
    offenders = Offenders()
    offenders.block(Identity("ip", "203.0.113.7"), 300, by="boss")
    offenders.allow(Identity("header", "key-123"), 3600, by="ops (manage.py)")
    open_offenders(page)
    page.click("#offenders-blocks-link")
    page.wait_for_selector("#blocks-table")
    rows = page.query_selector_all("tr.rl-block")
    assert [r.get_attribute("data-ident") for r in rows] == ["ip:203.0.113.7", "header:key-123"]
    assert "boss" in rows[0].inner_text() and "ops (manage.py)" in rows[1].inner_text()
    page.screenshot(path=str(IMAGES / "blocks.png"), full_page=True)
    blocks = f"{OFFENDERS}blocks/"
    width = phone_width(browser, live_server.url, blocks, "#blocks-table", "blocks-phone.png")
    assert width <= 400, "the active-blocks page scrolls sideways on a phone"
    page.click('tr.rl-block[data-ident="ip:203.0.113.7"] button[type=submit]')
    with page.expect_navigation():
        page.click("#confirm-yes")
    assert [r.get_attribute("data-ident") for r in page.query_selector_all("tr.rl-block")] == [
        "header:key-123"
    ]
    assert "Lifted the block or allow-listing of ip:203.0.113.7" in page.content()


def test_a_minute_with_nothing_recorded_is_said_in_words_not_a_blank_box(
    site_redis: Any, page: Any
) -> None:
    User.objects.create_superuser("boss", password="pw")
    open_offenders(page)
    quiet = "No recorded traffic in the last minute."
    assert page.inner_text("#offenders-chart .rl-no-traffic") == quiet
    assert page.locator("#offenders-chart svg").count() == 0
    page.goto(f"{page.base}{OFFENDERS}identity/?kind=ip&value=192.0.2.99")
    assert page.inner_text("#offender-activity .rl-no-traffic") == quiet


@pytest.mark.parametrize("redis_client", ["standalone"], indirect=True)
def test_the_last_denial_s_age_stays_on_one_line(site_redis: Any, page: Any) -> None:
    User.objects.create_superuser("boss", password="pw")
    traffic()
    open_offenders(page)
    for age in page.locator("td.rl-last time").all():
        box = age.bounding_box()
        assert box is not None and box["height"] < 2 * 16, f"{age.inner_text()!r} wraps"


def said_once(page: Any, error: str) -> bool:
    """The error box says Redis failed, and nothing else on the page mentions Redis."""
    said = page.inner_text(error)
    elsewhere = page.inner_text("#content").replace(said, "")
    return "could not read" in said.lower() and "redis" not in elsewhere.lower()


def test_with_redis_down_the_error_shows_once(redis_down: None, page: Any) -> None:
    User.objects.create_superuser("boss", password="pw")
    open_offenders(page)
    assert said_once(page, "#offenders-error")
    page.goto(f"{page.base}{OFFENDERS}identity/?kind=ip&value=192.0.2.99")
    assert said_once(page, "#offender-error")
