"""A URLconf whose translated routes are all under ``i18n_patterns``: the path's prefix
names the language they are resolved in, whichever middleware comes first (no W016)."""

from __future__ import annotations

from django.conf.urls.i18n import i18n_patterns
from django.urls import URLPattern, URLResolver, path

from tests.request.translated_plain_urls import page, translated

urlpatterns: list[URLPattern | URLResolver] = [
    *i18n_patterns(path(translated("chat/", fr="discussion/"), page)),
]
