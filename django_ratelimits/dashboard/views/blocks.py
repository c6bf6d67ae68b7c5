"""The active-blocks page: every block and allow-listing in force, with Lift."""

from __future__ import annotations

from typing import Any

from django.contrib.admin import AdminSite
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.translation import gettext

from django_ratelimits.dashboard.present import kind_label, to_datetime
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
from django_ratelimits.offenders.text import duration


def blocks_page(request: HttpRequest, site: AdminSite) -> HttpResponse:
    require_view(request)
    context: dict[str, Any] = {
        **admin_context(request, site, gettext("Active blocks and allow-listings")),
        "action_url": reverse(f"{site.name}:django_ratelimits_offender_action"),
        "can_lift": request.user.has_perm(Action.LIFT.permission),
    }
    try:
        active = Offenders().active()
    except BackendError as exc:
        context["error"] = gettext("Could not read the blocks from Redis: %(error)s") % {
            "error": exc
        }
        return TemplateResponse(request, TEMPLATES + "blocks.html", context)
    context["rows"] = [_row(o, site) for o in active.overrides]
    context["more"] = active.total - len(active.overrides)
    return TemplateResponse(request, TEMPLATES + "blocks.html", context)


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
        "url": detail_url(site, identity) if identity else None,
        "until": to_datetime(override.until_ms),
        "left": duration(override.seconds),
        "set_at": to_datetime(override.note.at_us // 1000) if override.note else None,
    }
