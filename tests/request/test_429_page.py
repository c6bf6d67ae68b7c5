"""The 429 page a browser gets: the site's name, the wait in words, and a way back
that never leads off the site."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from django.test import Client
from django.utils.functional import SimpleLazyObject, empty

from django_ratelimits import responses
from django_ratelimits.models import Policy
from django_ratelimits.offenders import text
from django_ratelimits.policies import get_registry
from django_ratelimits.testing import FakeClock

pytestmark = pytest.mark.django_db
HTML = {"Accept": "text/html"}


def limited(client: Client, frozen_clock: FakeClock, secure: bool = False, **headers: str) -> str:
    """A 429 page, with 73 seconds left to wait."""
    Policy.objects.create(name="api", rates="1/h", path=r"^/api/", algorithm="sliding_log")
    get_registry().refresh()
    assert client.get("/api/hello").status_code == 200
    frozen_clock.advance(3600 - 73)
    response = client.get("/api/hello", headers={**HTML, **headers}, secure=secure)
    assert response.status_code == 429
    assert response["Retry-After"] == "73"
    return response.content.decode()


def test_the_page_names_the_site_says_the_wait_in_words_and_links_back(
    frozen_clock: FakeClock,
) -> None:
    page = limited(Client(), frozen_clock, Referer="http://testserver/shop/?q=1&page=2")
    assert "<h1>429 Too Many Requests</h1>" in page
    assert '<p class="site">testserver</p>' in page  # no django.contrib.sites: the host
    assert "You can try again in 1 minute 13 seconds." in page
    assert '<a href="http://testserver/shop/?q=1&amp;page=2" id="way-back">' in page
    assert "Back to the page you came from" in page
    assert "<script" not in page and "//cdn" not in page


@pytest.mark.parametrize(
    "referer",
    [
        "http://evil.example/phish",
        "http://testserver.evil.example/",
        "http://testserver@evil.example/",
        "//evil.example/",
        "javascript:alert(1)",
        "/relative",
        "",
    ],
)
def test_a_referer_off_the_site_is_not_followed(frozen_clock: FakeClock, referer: str) -> None:
    page = limited(Client(), frozen_clock, Referer=referer)
    assert '<a href="/" id="way-back">' in page
    assert "Go to the home page" in page
    assert "evil" not in page and "javascript" not in page


@pytest.mark.parametrize(
    ("referer", "back"),
    [("http://testserver/shop/", "/"), ("https://testserver/shop/", "https://testserver/shop/")],
)
def test_an_https_page_does_not_link_back_to_http(
    frozen_clock: FakeClock, referer: str, back: str
) -> None:
    page = limited(Client(), frozen_clock, secure=True, Referer=referer)
    assert f'<a href="{back}" id="way-back">' in page


def test_a_referer_is_escaped(frozen_clock: FakeClock) -> None:
    page = limited(Client(), frozen_clock, Referer='http://testserver/?q="><b>x</b>')
    assert "<b>x</b>" not in page
    assert "&quot;&gt;&lt;b&gt;" in page


def test_the_sites_framework_names_the_site(
    frozen_clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As if django.contrib.sites were installed, its current Site named "Shop" (installing
    # the app for one test would leave the app registry changed for the tests after it).
    monkeypatch.setattr(responses, "apps", SimpleNamespace(is_installed=lambda name: True))
    monkeypatch.setattr(responses, "get_current_site", lambda request: SimpleNamespace(name="Shop"))
    page = limited(Client(), frozen_clock)
    assert '<p class="site">Shop</p>' in page
    assert "<title>429 Too Many Requests · Shop</title>" in page


def test_a_project_overrides_the_template(
    frozen_clock: FakeClock, settings: Any, tmp_path: Any
) -> None:
    (tmp_path / "django_ratelimits").mkdir()
    (tmp_path / "django_ratelimits" / "429.html").write_text(
        "ours: {{ site_name }} {{ retry_after }} {{ back_url }}"
    )
    settings.TEMPLATES = [{**settings.TEMPLATES[0], "DIRS": [str(tmp_path)]}]
    assert limited(Client(), frozen_clock) == "ours: testserver 73 /"


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (0, "1 second"),
        (1, "1 second"),
        (59, "59 seconds"),
        (60, "1 minute"),
        (73, "1 minute 13 seconds"),
        (3600, "1 hour"),
        (3661, "1 hour 1 minute"),
        (90_000, "1 day 1 hour"),
    ],
)
def test_the_wait_in_words(seconds: int, words: str) -> None:
    assert text.words(seconds) == words


# A site mounted under a prefix (``FORCE_SCRIPT_NAME``, or a WSGI server's ``SCRIPT_NAME``:
# gunicorn's environment variable, a proxy's header): its home page is the prefix, not
# the host's ``/``, which is another application or nothing.
@pytest.mark.parametrize("how", ["FORCE_SCRIPT_NAME", "SCRIPT_NAME"])
def test_under_a_script_prefix_the_home_page_is_the_prefix(
    frozen_clock: FakeClock, settings: Any, how: str
) -> None:
    client = Client()
    if how == "FORCE_SCRIPT_NAME":
        settings.FORCE_SCRIPT_NAME = "/app"
    else:
        client.defaults["SCRIPT_NAME"] = "/app"
    page = limited(client, frozen_clock)  # the path policy ^/api/ still matches: path_info
    assert '<a href="/app/" id="way-back">' in page
    assert "Go to the home page" in page
    # A referer on the site is still the way back.
    again = client.get("/api/hello", headers={**HTML, "Referer": "http://testserver/app/shop/"})
    assert again.status_code == 429
    assert '<a href="http://testserver/app/shop/" id="way-back">' in again.content.decode()


class LazyNonce(SimpleLazyObject):
    """A nonce as django-csp and Django 6 make it: made when first rendered, and false
    until then (so that asking whether there is one does not put one in the header)."""

    def __bool__(self) -> bool:
        return self._wrapped is not empty


def nonce_from_context(request: Any) -> dict[str, LazyNonce]:
    """Django 6's ``django.template.context_processors.csp``, as far as the page sees it."""
    return {"csp_nonce": LazyNonce(lambda: "ctx-nonce-123")}


class NonceOnRequest:
    """django-csp's ``CSPMiddleware``, as far as the page sees it: ``request.csp_nonce``."""

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: Any) -> Any:
        request.csp_nonce = LazyNonce(lambda: "req-nonce-456")
        return self.get_response(request)


def test_the_inline_style_carries_djangos_csp_nonce(frozen_clock: FakeClock, settings: Any) -> None:
    # Under a Content-Security-Policy without 'unsafe-inline' the page's one <style>
    # is refused (the page is still readable, unstyled); with the nonce of Django 6's
    # CSP middleware in the context, it applies.
    options = settings.TEMPLATES[0]["OPTIONS"]
    processors = [*options["context_processors"], f"{__name__}.nonce_from_context"]
    settings.TEMPLATES = [
        {**settings.TEMPLATES[0], "OPTIONS": {**options, "context_processors": processors}}
    ]
    page = limited(Client(), frozen_clock)
    assert '<style nonce="ctx-nonce-123">' in page


def test_the_inline_style_carries_django_csps_nonce(frozen_clock: FakeClock, settings: Any) -> None:
    settings.MIDDLEWARE = [f"{__name__}.NonceOnRequest", *settings.MIDDLEWARE]
    page = limited(Client(), frozen_clock)
    assert '<style nonce="req-nonce-456">' in page


def test_without_a_csp_nonce_the_style_has_no_nonce_attribute(frozen_clock: FakeClock) -> None:
    page = limited(Client(), frozen_clock)
    assert "<style>" in page and "nonce" not in page
