"""The dashboard tells the truth, in real headless Chromium (issue 11, findings 1,
5 and 6): shadow hits apart from denials, one row per request, and who was behind
an address recorded with no box ticked.

Traffic comes from Django's test client (its own address each); the dashboard is
read in Chromium. The engine runs on the test clock, so no window ends mid-test.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import User
from django.test import Client

from django_ratelimits.models import Policy
from django_ratelimits.policies import current
from tests.dashboard.browsing import IMAGES, open_offenders, phone_width

OFFENDERS = "/admin/django_ratelimits/policy/offenders/"
DETAIL = "/admin/django_ratelimits/policy/offenders/identity/"

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def page(browser: Any, live_server: Any, frozen_clock: Any) -> Iterator[Any]:
    User.objects.create_superuser("boss", password="pw")
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    tab = context.new_page()
    tab.base = live_server.url
    open_offenders(tab)
    yield tab
    context.close()


def policies(**fields: dict[str, Any]) -> None:
    for name, values in fields.items():
        Policy.objects.create(name=name, path="^/api/hello", algorithm="sliding_log", **values)
    current().refresh()


def visit(address: str, times: int, user: User | None = None) -> list[int]:
    client = Client(REMOTE_ADDR=address)
    if user is not None:
        client.force_login(user)
    return [client.get("/api/hello").status_code for _ in range(times)]


def identity_page(page: Any, address: str) -> None:
    page.goto(f"{page.base}{DETAIL}?{urlencode({'kind': 'ip', 'value': address})}")
    page.wait_for_selector("#offender-summary")


@pytest.mark.parametrize("redis_client", ["standalone"], indirect=True)
def test_an_address_only_a_shadow_policy_caught_is_listed_apart(
    page: Any, browser: Any, live_server: Any
) -> None:
    policies(enf={"rates": "5/m"}, watch={"rates": "1/m", "mode": "shadow"})
    assert visit("192.0.2.11", 4) == [200] * 4  # nothing was refused
    page.reload()
    page.wait_for_selector("#offenders-table")
    assert page.query_selector('tr.offender[data-ident="ip:192.0.2.11"]') is None
    page.select_option("#id_shown", "shadow")
    page.click("#offender-filters-apply")
    row = page.wait_for_selector('tr.offender[data-ident="ip:192.0.2.11"]')
    assert "3" in row.inner_text() and "watch" in row.inner_text()
    assert "would-be denials" in page.inner_text("#offenders-table thead").lower()
    page.screenshot(path=str(IMAGES / "offenders-shadow.png"), full_page=True)
    # On a phone each row is a card whose labels must say the same as the columns.
    labels = row.eval_on_selector_all("td", "tds => tds.map(td => td.dataset.label)")
    assert "Would-be denials" in labels and "Denials" not in labels
    shadow = f"{OFFENDERS}?shown=shadow"
    width = phone_width(
        browser, live_server.url, shadow, "#offenders-table", "offenders-shadow-phone.png"
    )
    assert width <= 400, "the shadow ledger scrolls sideways on a phone"
    identity_page(page, "192.0.2.11")
    assert page.inner_text("#offender-denials").startswith("none recorded")
    assert page.inner_text("#offender-shadow").startswith("3")
    outcomes = [cell.inner_text() for cell in page.query_selector_all("tr.hit td:nth-child(4)")]
    assert outcomes == ["would have been denied"] * 3
    page.screenshot(path=str(IMAGES / "identity-shadow.png"), full_page=True)


@pytest.mark.parametrize("redis_client", ["standalone"], indirect=True)
def test_a_request_two_policies_count_is_one_recent_hit(page: Any) -> None:
    policies(
        enf={"rates": "20/m", "record_metadata": "every"},
        watch={"rates": "20/m", "mode": "shadow", "record_metadata": "every"},
    )
    assert visit("192.0.2.12", 12) == [200] * 12
    identity_page(page, "192.0.2.12")
    hits = page.query_selector_all("tr.hit")
    assert len(hits) == 12
    assert all("enf, watch" in hit.inner_text() for hit in hits)
    assert page.inner_text("tr.behind").split() == ["anonymous", "12"]


@pytest.mark.parametrize("redis_client", ["standalone"], indirect=True)
def test_who_was_behind_an_address_is_recorded_with_no_box_ticked(page: Any) -> None:
    policies(api={"rates": "2/m"})  # "record who" as it comes
    mallory = User.objects.create_user("mallory", password="pw")
    assert visit("192.0.2.13", 4, mallory) == [200, 200, 429, 429]
    identity_page(page, "192.0.2.13")
    behind = page.inner_text("tr.behind")
    assert behind.split("\t") == [f"mallory (user {mallory.pk})", "2"]
    assert len(page.query_selector_all("tr.hit.rl-denied")) == 2
