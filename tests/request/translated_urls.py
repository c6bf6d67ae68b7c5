"""A URLconf whose routes are translated (``path(_("chat/"), ...)``), outside
``i18n_patterns``: the language comes from the request (``Accept-Language``), and one
path may name different views in different languages. ``/chat/`` is the chat in
English and the page of cats in French (``cat/`` is ``chat/`` there, the chat
``discussion/``); admin is ``/admin/`` in English, ``/gestion/`` in French.

The routes are lazy strings whose value is the active language's, as ``gettext_lazy``
gives them with a catalog: Django compiles such a route once per language.
"""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, URLResolver, path

from django_ratelimits.decorators import ratelimit
from tests.request.translated_plain_urls import translated


@ratelimit("chat", rate="2/h", key="ip")
def chat(request: HttpRequest) -> HttpResponse:
    return HttpResponse("chat")


@ratelimit("cats", rate="5/h", key="ip")
def cats(request: HttpRequest) -> HttpResponse:
    return HttpResponse("cats")


urlpatterns: list[URLPattern | URLResolver] = [
    path(translated("chat/", fr="discussion/"), chat),
    path(translated("cat/", fr="chat/"), cats),
    path(translated("admin/", fr="gestion/"), admin.site.urls),
]
