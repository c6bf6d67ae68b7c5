"""The 429 page in real headless Chromium: the link back returns to the page the
visitor came from, and the page loads nothing but itself.

The limited page is ``/cbv`` (``@ratelimit("t-cbv", rate="2/m")`` in ``tests.urls``):
a view decorator works on the live server whatever middleware it started with.
"""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.mark.parametrize("redis_client", ["standalone"], indirect=True)
def test_the_way_back_returns_to_the_page_before(
    browser: Any, live_server: Any, site_redis: Any
) -> None:
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    page = context.new_page()
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    limited = f"{live_server.url}/cbv"
    try:
        assert [page.goto(limited).status for _ in range(2)] == [200, 200]
        page.goto(f"{live_server.url}/soft")
        # A link on the page the visitor is on, to the limited page.
        page.evaluate(
            "url => { document.body.innerHTML = `<a id=go href=${url}>go</a>`; }", limited
        )
        requested.clear()
        with page.expect_navigation() as navigation:
            page.click("#go")
        assert navigation.value.status == 429
        assert page.inner_text("h1") == "429 Too Many Requests"
        assert "You can try again in " in page.inner_text("main")
        assert page.inner_text(".site") == live_server.url.split("//", 1)[1]
        # Nothing fetched but the page itself: no script, style sheet or font, from anywhere.
        assert [url for url in requested if not url.endswith("/favicon.ico")] == [limited]
        page.screenshot(path="test-logs/screenshots/429-phone.png", full_page=True)
        with page.expect_navigation():
            page.click("#way-back")
        assert page.url == f"{live_server.url}/soft"
    finally:
        context.close()
