"""Translated routes (``path(_("chat/"), ...)``) outside ``i18n_patterns``, to a view
that declares no policy: for the system checks, which read a URLconf's routes and call
no view. (Importing a URLconf whose views declare ``@ratelimit`` defaults makes the
process know those policies for the rest of the run, and other tests see them.)"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, URLResolver, path
from django.utils.functional import lazy
from django.utils.translation import get_language


def translated(english: str, **others: str) -> str:
    """``english``, or its translation in the active language."""
    return lazy(lambda: others.get(get_language() or "", english), str)()


def page(request: HttpRequest) -> HttpResponse:
    return HttpResponse("page")


urlpatterns: list[URLPattern | URLResolver] = [
    path(translated("chat/", fr="discussion/"), page),
]
