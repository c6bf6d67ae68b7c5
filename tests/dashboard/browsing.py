"""What the browser tests share: where screenshots go, signing in, a tab of each size.

Screenshots go to test-logs/screenshots/; with ``UPDATE_SCREENSHOTS=1`` they
replace the ones in docs/images/ that the README and docs/dashboard.md show.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / ("docs/images" if os.environ.get("UPDATE_SCREENSHOTS") else "test-logs/screenshots")
OFFENDERS = "/admin/django_ratelimits/policy/offenders/"
DESKTOP: dict[str, Any] = {"viewport": {"width": 1280, "height": 860}}
PHONE: dict[str, Any] = {"viewport": {"width": 390, "height": 844}, "is_mobile": True}


@contextmanager
def tab(browser: Any, base: str, size: dict[str, Any] = DESKTOP) -> Iterator[Any]:
    """A new page of ``size`` (``DESKTOP`` or ``PHONE``) on the live server at ``base``."""
    IMAGES.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(**size)
    page = context.new_page()
    page.base = base
    try:
        yield page
    finally:
        context.close()


def log_in(page: Any, username: str, password: str = "pw", then: str = OFFENDERS) -> None:
    page.goto(f"{page.base}/admin/login/?next={quote(then)}")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    with page.expect_navigation():  # the next page has loaded, whether it is `then` or login
        page.click("input[type=submit]")


def open_offenders(page: Any, username: str = "boss") -> None:
    """Sign in as ``username`` (password "pw") and wait for the offenders table."""
    log_in(page, username)
    page.wait_for_selector("#offenders-table")


def phone_width(browser: Any, base: str, then: str, selector: str, image: str) -> int:
    """How wide ``then`` is on a phone, signed in as "boss" (password "pw"), once
    ``selector`` is there; its screenshot is saved as ``image``."""
    with tab(browser, base, PHONE) as phone:
        log_in(phone, "boss", then=then)
        phone.wait_for_selector(selector)
        phone.screenshot(path=str(IMAGES / image), full_page=True)
        width: int = phone.evaluate("document.documentElement.scrollWidth")
    return width
