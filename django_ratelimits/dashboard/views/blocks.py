"""The active-blocks page: every block and allow-listing in force, with Lift."""

from __future__ import annotations

from typing import Any

from django.contrib.admin import AdminSite
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.translation import gettext

from django_ratelimits.dashboard.present import to_datetime
from django_ratelimits.dashboard.views.common import (
    TEMPLATES,
    admin_context,
    detail_url,
    require_view,
)
from django_ratelimits.engine import Identity
from django_ratelimits.engine.controls import ActiveOverride
from django_ratelimits.engine.errors import BackendError
from django_ratelimits.engine.keys import ident
from django_ratelimits.offenders import Action, Offenders
from django_ratelimits.offenders.identities import counted_now
from django_ratelimits.offenders.text import duration
from django_ratelimits.policies.labels import kind_label

# Rows of a page, and the deepest page shown (bans on client-chosen identities can hold
# tens of thousands of overrides: a page is read and rendered, never the whole index).
PER_PAGE = 100
MAX_PAGE = 200


def blocks_page(request: HttpRequest, site: AdminSite) -> HttpResponse:
    require_view(request)
    page = _page(request.GET.get("page"))
    context: dict[str, Any] = {
        **admin_context(request, site, gettext("Active blocks and allow-listings")),
        "action_url": reverse(f"{site.name}:django_ratelimits_offender_action"),
        "can_lift": request.user.has_perms(Action.LIFT.permissions),
        "page": page,
    }
    try:
        active = Offenders().active((page - 1) * PER_PAGE, PER_PAGE)
    except BackendError as exc:
        context["error"] = gettext("Could not read the blocks from Redis: %(error)s") % {
            "error": exc
        }
        return TemplateResponse(request, TEMPLATES + "blocks.html", context)
    pages = max(1, min(MAX_PAGE, -(-active.total // PER_PAGE)))
    here = reverse(f"{site.name}:django_ratelimits_blocks")
    context["rows"] = [_row(o, site) for o in active.overrides]
    context["total"] = active.total
    context["pages"] = pages
    context["previous_url"] = f"{here}?page={page - 1}" if page > 1 else None
    context["next_url"] = f"{here}?page={page + 1}" if page < pages else None
    context["more"] = max(0, active.total - MAX_PAGE * PER_PAGE)
    return TemplateResponse(request, TEMPLATES + "blocks.html", context)


def _page(text: str | None) -> int:
    """The page asked for: 1 unless a whole number of ASCII digits, at most
    :data:`MAX_PAGE` (``str.isdigit`` alone passes "²", which ``int`` refuses)."""
    if text is None or not text.isascii() or not text.isdigit() or len(text) > 6:
        return 1
    return max(1, min(int(text), MAX_PAGE))


def _row(override: ActiveOverride, site: AdminSite) -> dict[str, Any]:
    kind, _, value = override.label.partition(":")
    # A label cut short or made printable names no identity to act on.
    identity: Identity | None = Identity(kind, value) if override.note else None
    if identity is not None and ident(identity) != override.ident:
        identity = None
    return {
        "override": override,
        "kind": kind_label(override.kind),
        "identity": identity,
        # Set before HASH_IPS or an address prefix changed: no request is counted as it.
        "stale": identity is not None and not counted_now(identity),
        "url": detail_url(site, identity) if identity else None,
        "until": to_datetime(override.until_ms),
        "left": duration(override.seconds),
        "set_at": to_datetime(override.note.at_us // 1000) if override.note else None,
    }
