"""Path policies on a site that serves its pages under language prefixes
(``i18n_patterns``), through whole requests on real Redis.

``/login/``, ``/fr/login/`` and ``/de/login/`` reach the same view: a path pattern
written for the page (``^/login/$``) limits it under every prefix, a request counting
once per policy, and a failed-login policy guards its login URL in every language.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib.auth.models import User
from django.test import AsyncClient, Client, override_settings

from django_ratelimits.logins import BACKEND
from django_ratelimits.models import Policy
from django_ratelimits.policies import get_registry
from django_ratelimits.testing import FakeClock

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.parametrize("redis_client", ["standalone"], indirect=True),
]

RIGHT = "s3cret-pass"
LANGUAGES = [("en", "English"), ("fr", "French"), ("de", "German")]
UNPREFIXED, PREFIXED = "tests.i18n_urls", "tests.i18n_prefixed_urls"


def with_locale(middleware: list[str]) -> list[str]:
    """``middleware`` with Django's LocaleMiddleware after the sessions', as its docs say."""
    at = middleware.index("django.contrib.sessions.middleware.SessionMiddleware") + 1
    return [*middleware[:at], "django.middleware.locale.LocaleMiddleware", *middleware[at:]]


@pytest.fixture(params=[UNPREFIXED, PREFIXED])
def site(request: pytest.FixtureRequest, frozen_clock: FakeClock) -> Iterator[str]:
    """The site in three languages, English by default, prefixed or not; yields the
    English prefix ("" or "/en"). On the test clock: the policies' fixed windows (an
    hour, the lockout's 15 minutes) would start again at their turn on Redis' clock,
    however close together the requests."""
    with override_settings(
        ROOT_URLCONF=request.param,
        LANGUAGE_CODE="en",
        LANGUAGES=LANGUAGES,
        MIDDLEWARE=with_locale(settings.MIDDLEWARE),
        AUTHENTICATION_BACKENDS=[BACKEND, "django.contrib.auth.backends.ModelBackend"],
    ):
        User.objects.create_user("alice", password=RIGHT)
        yield "" if request.param == UNPREFIXED else "/en"


def policy(**fields: Any) -> Policy:
    row = Policy(**{"name": "p", "rates": "3/h", "algorithm": "fixed_window", **fields})
    row.full_clean()
    row.save()
    get_registry().refresh()
    return row


def paths(english: str, page: str) -> list[str]:
    return [f"{english}{page}", f"/fr{page}", f"/de{page}"]


def test_every_language_reaches_the_page(site: str) -> None:
    """What the other tests rely on: Django serves the page under each prefix."""
    for path, language in zip(paths(site, "/login/"), ["en", "fr", "de"], strict=True):
        response = Client().get(path)
        assert (response.status_code, response.content.decode()) == (200, f"page in {language}")


@pytest.mark.parametrize("pattern", [r"^/login/$", r"^/login/", r"/login/$", r"login"])
def test_a_page_policy_counts_the_page_under_every_prefix(site: str, pattern: str) -> None:
    policy(path=pattern)
    sent = [paths(site, "/login/")[i % 3] for i in range(10)]
    statuses = [Client().get(path).status_code for path in sent]
    # Once per request, whether the pattern matches the path, its unprefixed form or both.
    assert statuses == [200] * 3 + [429] * 7


def test_an_api_policy_counts_its_prefixed_paths(site: str) -> None:
    policy(path=r"^/api/")
    statuses = [Client().get(path).status_code for path in paths(site, "/api/hello") * 2]
    assert statuses == [200, 200, 200, 429, 429, 429]


def test_the_async_stack_counts_them_too(site: str) -> None:
    policy(path=r"^/login/$")
    client = AsyncClient()

    async def send() -> list[int]:
        return [(await client.get(path)).status_code for path in paths(site, "/login/") * 2]

    assert async_to_sync(send)() == [200, 200, 200, 429, 429, 429]


def test_a_path_outside_the_prefixes_and_an_unknown_prefix_stay_apart(site: str) -> None:
    policy(path=r"^/login/$", rates="1/h")
    assert Client().get(f"{site}/login/").status_code == 200
    # Not a language of LANGUAGES: Django serves nothing there, and the policy counts nothing.
    assert [Client().get(path).status_code for path in ("/it/login/", "/xx/login/")] == [404] * 2
    assert Client().get("/fr/login/").status_code == 429
    policy(name="health", path=r"^/health$", rates="1/h")
    assert [Client().get("/health").status_code for _ in range(2)] == [200, 429]


def login(path: str, password: str = "wrong") -> int:
    response = Client(REMOTE_ADDR="198.51.100.7").post(
        path, {"username": "alice", "password": password}
    )
    return response.status_code


@pytest.mark.parametrize("key", ["ip", "username"])
def test_a_login_lockout_holds_under_every_prefix(site: str, key: str) -> None:
    policy(
        name="login-failures",
        rates="3/15m",
        counts="failed_logins",
        key=key,
        path=r"^/accounts/login/$",
    )
    urls = paths(site, "/accounts/login/")
    assert [login(path) for path in urls] == [200, 200, 200]  # the form again: 3 failures
    assert [login(path, RIGHT) for path in urls] == [429, 429, 429]


# --------------------------------------------------------------------------- the path searched


@pytest.mark.parametrize(
    ("path", "searched"),
    [
        ("/fr/login/", "/login/"),
        ("/de/api/hello", "/api/hello"),
        ("/fr", "/"),
        ("/fr-ca/login/", "/login/"),  # LocaleMiddleware reads French: counted as the page
        ("/login/", None),
        ("/it/login/", None),  # a language, not one of LANGUAGES
        ("//fr/login/", None),
        ("/fr-" + "x" * 300 + "/login/", "/login/"),  # past the cache: answered afresh
    ],
)
def test_the_path_also_searched_is_the_one_without_its_language(
    site: str, path: str, searched: str | None
) -> None:
    from django.test import RequestFactory

    from django_ratelimits.resolved import unprefixed

    assert unprefixed(RequestFactory().get(path)) == searched


def test_a_site_without_language_prefixes_searches_the_path_alone(site_redis: Any) -> None:
    from django.test import RequestFactory

    from django_ratelimits.resolved import unprefixed

    with override_settings(LANGUAGE_CODE="en", LANGUAGES=LANGUAGES):  # tests.urls
        assert unprefixed(RequestFactory().get("/fr/api/hello")) is None
        policy(path=r"^/api/", rates="1/h")
        assert [Client().get(path).status_code for path in ("/api/hello", "/fr/api/hello")] == [
            200,
            404,  # Django serves nothing there, and the policy did not count it
        ]


def test_a_policy_matching_either_path_is_listed_once_in_priority_order(site: str) -> None:
    policy(name="french", path=r"^/fr/", priority=1)
    policy(name="page", path=r"^/login/$", priority=5)
    policy(name="anywhere", path=r"login", priority=3)
    registry = get_registry()
    assert [spec.name for spec in registry.match("/fr/login/", "get", "/login/")] == [
        "page",
        "anywhere",
        "french",
    ]
    assert [spec.name for spec in registry.match("/de/login/", "GET", "/login/")] == [
        "page",
        "anywhere",
    ]


# --------------------------------------------------------------------------- one language's pattern


def test_a_pattern_that_starts_with_a_language_is_a_warning_naming_the_fix(site: str) -> None:
    from django.core.checks import run_checks

    from django_ratelimits.checks import TAG

    for name, path in (
        ("english", r"^/en/login/$"),
        ("french", r"\A/fr/api/"),
        ("escaped", r"^/de\/login"),
        ("page", r"^/login/$"),
        ("a-word", r"^/english/"),
        ("not-a-segment", r"^/en$"),
        ("unanchored", r"/en/login/"),
    ):
        Policy.objects.create(name=name, rates="3/h", path=path)
    found = {
        message.obj: message
        for message in run_checks(tags=[TAG], databases=["default"])
        if message.id == "django_ratelimits.W015"
    }
    assert sorted(found) == ["policy 'english'", "policy 'escaped'", "policy 'french'"]
    assert "write '^/login/$' in admin" in found["policy 'english'"].hint
    assert "write '\\\\A/api/' in admin" in found["policy 'french'"].hint
    assert "without '/de/'" in found["policy 'escaped'"].hint
    # A site without language prefixes: /en/ is a path like any other.
    with override_settings(ROOT_URLCONF="tests.urls"):
        assert not [m for m in run_checks(tags=[TAG]) if m.id == "django_ratelimits.W015"]


def test_admin_saves_a_pattern_of_one_language_with_a_warning_naming_the_fix(site: str) -> None:
    from django.contrib.messages import get_messages
    from django.forms.models import model_to_dict
    from django.urls import reverse

    boss = User.objects.create_superuser("boss", password=RIGHT)
    client = Client()
    client.force_login(boss)
    row = policy(name="english", rates="3/m")
    # An unticked box is left out of a form, as a browser sends it.
    fields = model_to_dict(row).items()
    form = {name: value for name, value in fields if value is not None and value is not False}
    form |= {"path": r"^/en/login/$", "tiers-TOTAL_FORMS": "0", "tiers-INITIAL_FORMS": "0"}
    response = client.post(reverse("admin:django_ratelimits_policy_change", args=[row.pk]), form)
    row.refresh_from_db()
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert row.path == r"^/en/login/$"  # saved all the same
    texts = [str(message) for message in get_messages(response.wsgi_request)]
    assert any("“/en/”" in text and "write “^/login/$”" in text for text in texts), texts
