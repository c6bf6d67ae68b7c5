"""URLconfs of a site that serves its pages under language prefixes (``i18n_patterns``).

``tests.i18n_urls`` leaves the default language unprefixed (``/login/`` and
``/fr/login/``); ``tests.i18n_prefixed_urls`` prefixes every language (``/en/login/``,
``/fr/login/``). Both serve a page, an API view, Django's login view and admin, and keep
``/health`` outside the prefixes.
"""

from __future__ import annotations

from django.conf.urls.i18n import i18n_patterns
from django.contrib import admin
from django.contrib.auth.views import LoginView
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, URLResolver, path


def page(request: HttpRequest) -> HttpResponse:
    return HttpResponse(f"page in {request.LANGUAGE_CODE}")


def routes(*, prefix_default_language: bool) -> list[URLPattern | URLResolver]:
    return [
        path("health", page),
        *i18n_patterns(
            path("login/", page),
            path("api/hello", page),
            path("accounts/login/", LoginView.as_view(template_name="admin/login.html")),
            path("admin/", admin.site.urls),
            prefix_default_language=prefix_default_language,
        ),
    ]


urlpatterns = routes(prefix_default_language=False)
