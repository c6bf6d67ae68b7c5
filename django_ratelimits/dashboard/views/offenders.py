"""The offenders page and its JSON twin, which the page polls for live updates."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from django.contrib.admin import AdminSite
from django.http import HttpRequest, HttpResponse, JsonResponse, QueryDict
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.translation import gettext

from django_ratelimits.dashboard.forms import MAX_PAGE, PER_PAGE, PERIODS, FilterForm
from django_ratelimits.dashboard.present import (
    Activity,
    RowView,
    addresses,
    page_activity,
    row_view,
    user_labels,
)
from django_ratelimits.dashboard.views.common import (
    TEMPLATES,
    admin_context,
    detail_url,
    require_view,
)
from django_ratelimits.engine.errors import BackendError
from django_ratelimits.models import BlockedNetwork
from django_ratelimits.offenders import OffenderList, Offenders, Query, policy_names, users

REFRESH_SECONDS = 5
# The parts of the page that the JSON endpoint renders again: element id -> template.
PARTS = {
    "offenders-summary": "_summary.html",
    "offenders-chart": "_chart.html",
    "offenders-body": "_rows.html",
    "offenders-pagination": "_pagination.html",
}


@dataclass(frozen=True)
class Board:
    """One state of the offenders page: the filters, what Redis said (or why not)."""

    form: FilterForm
    filters: Query
    listing: OffenderList | None
    rows: tuple[RowView, ...]
    activity: Activity | None
    error: str | None
    query: QueryDict

    @property
    def filtered(self) -> bool:
        f = self.filters
        return any(x is not None for x in (f.kind, f.policy, f.network, f.user))

    @property
    def gone_user(self) -> str | None:
        """The id the user filter names when no user has it any more (deleted)."""
        return self.filters.user if self.form.user_gone else None

    @property
    def page(self) -> int:
        return self.filters.offset // PER_PAGE + 1

    @property
    def pages(self) -> int | None:
        """How many pages there are, when the index's count tells (no filter)."""
        if self.listing is None or self.listing.total is None or self.filtered:
            return None
        return min(MAX_PAGE, max(1, math.ceil(self.listing.total / PER_PAGE)))

    @property
    def has_next(self) -> bool:
        listing = self.listing
        return listing is not None and listing.has_next and self.page < MAX_PAGE

    @property
    def reach(self) -> int:
        """How many offenders pages can show, from the newest (or most denied)."""
        return MAX_PAGE * PER_PAGE

    def page_url(self, page: int) -> str:
        query = self.query.copy()
        query["page"] = str(page)
        return f"?{query.urlencode()}"

    def context(self) -> dict[str, Any]:
        page = self.page
        return {
            "board": self,
            "form": self.form,
            "rows": self.rows,
            "listing": self.listing,
            "error": self.error,
            "period": PERIODS[self.filters.period],
            "chart": self.activity.chart() if self.activity else "",
            "shadow": self.filters.shadow,
            "gone_user": self.gone_user,
            "page": page,
            "pages": self.pages,
            "previous_url": self.page_url(page - 1) if page > 1 else None,
            "next_url": self.page_url(page + 1) if self.has_next else None,
        }

    def json(self) -> dict[str, Any]:
        listing = self.listing
        return {
            "now_ms": listing.now_ms if listing else None,
            "period": self.filters.period,
            "order": self.filters.order,
            "shadow": self.filters.shadow,
            "page": self.page,
            "per_page": PER_PAGE,
            "has_next": self.has_next,
            "total": listing.total if listing else None,
            "offenders": [row.json() for row in self.rows],
            "activity": self.activity.json() if self.activity else None,
            "errors": self.form.errors.get_json_data(),
            "error": self.error,
        }


def offenders_page(request: HttpRequest, site: AdminSite) -> HttpResponse:
    require_view(request)
    board = load(request, site)
    context = {
        **admin_context(request, site, gettext("Rate-limit offenders")),
        **board.context(),
        "json_url": f"{reverse(f'{site.name}:django_ratelimits_offenders_json')}?"
        f"{request.GET.urlencode()}",
        "refresh_seconds": REFRESH_SECONDS,
        **blocklist_context(request, site),
    }
    return TemplateResponse(request, TEMPLATES + "offenders.html", context)


def blocklist_context(request: HttpRequest, site: AdminSite) -> dict[str, Any]:
    """How many networks are blocked now, and the link to their admin list (for those
    who may view it): requests from them are refused before any limit, so they never
    show as offenders."""
    if not request.user.has_perm("django_ratelimits.view_blockednetwork"):
        return {}
    return {
        "blocked_networks": BlockedNetwork.objects.active().count(),
        "blocklist_url": reverse(f"{site.name}:django_ratelimits_blockednetwork_changelist"),
    }


def offenders_json(request: HttpRequest, site: AdminSite) -> JsonResponse:
    """The page's data, and its changing parts as HTML (see docs/dashboard.md)."""
    require_view(request)
    board = load(request, site)
    data = board.json()
    context = board.context()
    data["html"] = {
        part: render_to_string(TEMPLATES + template, context, request)
        for part, template in PARTS.items()
    }
    return JsonResponse(data, status=503 if board.error else 200)


def load(request: HttpRequest, site: AdminSite) -> Board:
    form = FilterForm(request.GET, policy_names())
    form.is_valid()
    filters = form.query()
    try:
        listing = Offenders().listing(filters)
    except BackendError as exc:
        message = gettext("Could not read the offenders from Redis: %(error)s") % {"error": exc}
        return Board(form, filters, None, (), None, message, request.GET)
    known = users(who for row in listing.rows for who in (row.who, *(hit.who for hit in row.hits)))
    names = user_labels(known)
    for row in listing.rows:
        names.update(addresses(row.hits, row.offender.label))
    rows = tuple(
        row_view(row, listing.now_ms, names, lambda i: detail_url(site, i), known.ids)
        for row in listing.rows
    )
    activity = page_activity(listing.rows, listing.now_ms)
    return Board(form, filters, listing, rows, activity, None, request.GET)
