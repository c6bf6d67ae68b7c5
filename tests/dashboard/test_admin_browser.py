"""Admin around the dashboard in real headless Chromium: finding it, and the policy list.

Screenshots: see ``tests.dashboard.browsing``.
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from django.contrib.auth.models import User

from django_ratelimits.models import Policy
from tests.dashboard.browsing import IMAGES, OFFENDERS, PHONE, log_in, tab

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

DEMO_POLICIES = importlib.import_module("demo_project.shop.migrations.0001_seed_policies").POLICIES
POLICIES = "/admin/django_ratelimits/policy/"


def test_offenders_is_on_the_admin_index_and_in_the_sidebar(
    browser: Any, live_server: Any, page: Any
) -> None:
    User.objects.create_superuser("boss", password="pw")
    log_in(page, "boss", then="/admin/")
    index = page.locator("#content-main .app-django_ratelimits")
    names = ["Blocked networks", "Identity overrides", "Offenders", "Rate-limit policies"]
    assert index.locator("th a").all_inner_texts() == names
    page.screenshot(path=str(IMAGES / "admin-index.png"), full_page=True)
    index.get_by_role("link", name="Offenders", exact=True).click()
    page.wait_for_selector("#offenders-table")
    assert page.url == f"{page.base}{OFFENDERS}"

    page.goto(f"{page.base}{POLICIES}")
    sidebar = page.locator("#nav-sidebar .app-django_ratelimits")
    sidebar.get_by_role("link", name="Offenders", exact=True).click()
    page.wait_for_selector("#offenders-table")
    assert page.url == f"{page.base}{OFFENDERS}"

    with tab(browser, live_server.url, PHONE) as phone:
        log_in(phone, "boss", then="/admin/")
        phone.wait_for_selector("#content-main .app-django_ratelimits")
        phone.screenshot(path=str(IMAGES / "admin-index-phone.png"), full_page=True)


def test_every_policy_column_shows_at_1280_px_and_a_mode_on_one_line(page: Any) -> None:
    User.objects.create_superuser("boss", password="pw")
    for fields in DEMO_POLICIES:
        Policy.objects.create(**fields)
    log_in(page, "boss", then=POLICIES)
    page.wait_for_selector("#result_list")
    width = page.evaluate("document.documentElement.clientWidth")
    for column in ("methods", "priority", "updated"):
        header = page.locator(f"#result_list thead th.column-{column}")
        box = header.bounding_box()
        assert box is not None and box["x"] + box["width"] <= width, f"{column} is cut off"
        assert header.evaluate(
            "th => th.closest('.results').scrollWidth <= th.closest('.results').clientWidth"
        )
    for mode in page.locator("#result_list td.field-mode_word").all():
        box = mode.locator("span").bounding_box()
        assert box is not None and box["height"] < 2 * 16, "a mode label wraps"
    page.screenshot(path=str(IMAGES / "policies.png"), full_page=True)
