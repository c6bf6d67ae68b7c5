"""Which view a path names, on a site in several languages, through whole requests on
real Redis.

The middleware asks Django's resolver which view a path reaches: for the policies the
view names with ``@ratelimit`` and for the way back of a blocked admin (admin's login).
Under ``i18n_patterns`` ``/fr/admin/login/`` reaches admin's login only while French is
active, and a translated route (``path(_("chat/"), ...)``) names another view in
another language. The answer must be the one Django gives the request, whatever
language the previous request left active in the worker's thread, whichever of
``LocaleMiddleware`` and ``RateLimitMiddleware`` comes first.
"""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib.auth.models import User
from django.test import AsyncClient, Client, override_settings

import tests.request.translated_urls  # noqa: F401  (its @ratelimit defaults)
from django_ratelimits.engine import Identity
from django_ratelimits.models import Policy
from django_ratelimits.offenders import Offenders
from django_ratelimits.policies import get_registry

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.parametrize("redis_client", ["standalone"], indirect=True),
]

LANGUAGES = [("en", "English"), ("fr", "French"), ("de", "German")]
LOCALE = "django.middleware.locale.LocaleMiddleware"
LIMITER = "django_ratelimits.middleware.RateLimitMiddleware"
BLOCKED, PASSER_BY = "203.0.113.7", "198.51.100.20"


def middleware(locale: str) -> list[str]:
    """The site's middleware with ``LocaleMiddleware`` where ``locale`` says: where
    Django's docs put it (after the sessions', so above the limiter), or just below the
    limiter."""
    stack = [name for name in settings.MIDDLEWARE if name != LIMITER] + [LIMITER]
    if locale == "above":
        at = stack.index("django.contrib.sessions.middleware.SessionMiddleware") + 1
        return [*stack[:at], LOCALE, *stack[at:]]
    return [*stack, LOCALE]


@pytest.fixture(params=["above", "below"])
def order(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def site(urlconf: str, order: str) -> Any:
    return override_settings(
        ROOT_URLCONF=urlconf,
        LANGUAGE_CODE="en",
        LANGUAGES=LANGUAGES,
        MIDDLEWARE=middleware(order),
    )


@pytest.fixture
def blocked_admin(site_redis: Any) -> User:
    """A superuser whose address staff blocked, on a site limited everywhere."""
    Policy.objects.create(name="all", rates="1000/h", algorithm="gcra", key="ip", path="^/")
    get_registry().refresh()
    Offenders().block(Identity("ip", BLOCKED), 300)
    return User.objects.create_superuser("boss", password="s3cret-pass")


@pytest.mark.parametrize(
    ("urlconf", "english"), [("tests.i18n_urls", ""), ("tests.i18n_prefixed_urls", "/en")]
)
def test_a_blocked_admin_reaches_admin_s_login_under_every_prefix(
    blocked_admin: User, order: str, urlconf: str, english: str
) -> None:
    """Whatever language the worker's previous request left active: the passer-by's
    page in another language comes first each time."""
    me, passer_by = Client(REMOTE_ADDR=BLOCKED), Client(REMOTE_ADDR=PASSER_BY)
    prefixes = [english, "/fr", "/de"]
    with site(urlconf, order):
        seen = []
        for mine in prefixes:
            for theirs in prefixes:
                assert passer_by.get(f"{theirs}/login/").status_code == 200
                seen.append(me.get(f"{mine}/admin/login/").status_code)
        assert seen == [200] * 9
        assert me.get("/fr/login/").status_code == 429  # the block holds elsewhere
        form = {"username": "boss", "password": "s3cret-pass"}
        assert passer_by.get("/de/login/").status_code == 200
        assert me.post("/fr/admin/login/", form).status_code == 302  # back in


def test_a_blocked_admin_reaches_a_translated_admin_s_login(blocked_admin: User) -> None:
    me = Client(REMOTE_ADDR=BLOCKED, HTTP_ACCEPT_LANGUAGE="fr")
    with site("tests.request.translated_urls", "above"):
        # In English /gestion/ is nothing: Django and the limiter say 404.
        assert Client(HTTP_ACCEPT_LANGUAGE="en").get("/gestion/login/").status_code == 404
        assert me.get("/gestion/login/").status_code == 200
        assert me.get("/chat/").status_code == 429  # the block holds elsewhere
        assert me.get("/admin/login/").status_code == 429  # in French, no admin page


def visit(path: str, language: str) -> int:
    client = Client(REMOTE_ADDR=PASSER_BY, HTTP_ACCEPT_LANGUAGE=language)
    return int(client.get(path).status_code)


def test_a_translated_path_counts_the_policies_of_its_view_in_the_request_s_language(
    site_redis: Any,
) -> None:
    """``/chat/`` is the chat (2/h) in English and the cats (5/h) in French: the French
    visits count the cats' policy alone, and never refuse the chat's visitors."""
    get_registry().refresh()
    with site("tests.request.translated_urls", "above"):
        english = [visit("/chat/", "en")]
        french = [visit("/chat/", "fr") for _ in range(6)]
        english += [visit("/chat/", "en") for _ in range(2)]
    assert (english, french) == ([200, 200, 429], [200] * 5 + [429])


def test_the_async_stack_resolves_in_the_request_s_language_too(site_redis: Any) -> None:
    # An ASGI request's address is its scope's: the test client's is 127.0.0.1.
    Policy.objects.create(name="all", rates="1000/h", algorithm="gcra", key="ip", path="^/")
    get_registry().refresh()
    Offenders().block(Identity("ip", "127.0.0.1"), 300)

    async def visit() -> list[int]:
        me = AsyncClient()
        paths = ["/fr/admin/login/", "/admin/login/", "/de/admin/login/", "/fr/login/"]
        return [(await me.get(path)).status_code for path in paths]

    with site("tests.i18n_urls", "below"):
        assert async_to_sync(visit)() == [200, 200, 200, 429]
