"""The admin's search box, bounded: a search of many words is a message, not a 500.

Django admin turns each word of a search into one condition per search field, all
joined into one query. A few thousand words make an expression SQLite refuses ("too
large") and other databases plan for a long time: an editor's paste would answer
500. :class:`BoundedSearch` keeps the search to :data:`MAX_SEARCH_WORDS` words and
answers a longer one with an empty list and a message saying why.
"""

from __future__ import annotations

from typing import Any, Final

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.text import smart_split
from django.utils.translation import ngettext

__all__ = ["MAX_SEARCH_WORDS", "BoundedSearch"]

MAX_SEARCH_WORDS: Final = 32


class BoundedSearch(admin.ModelAdmin):
    """A model admin whose search takes at most :data:`MAX_SEARCH_WORDS` words."""

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        for words, _ in enumerate(smart_split(search_term), start=1):
            if words > MAX_SEARCH_WORDS:
                messages.error(
                    request,
                    ngettext(
                        "Search for at most %(count)d word.",
                        "Search for at most %(count)d words.",
                        MAX_SEARCH_WORDS,
                    )
                    % {"count": MAX_SEARCH_WORDS},
                )
                return queryset.none(), False
        return super().get_search_results(request, queryset, search_term)
