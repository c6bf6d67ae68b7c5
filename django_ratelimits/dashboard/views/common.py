"""What every dashboard view shares: the permission check, admin's context, links,
and the page that says why an identity is refused."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib.admin import AdminSite
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.translation import gettext

from django_ratelimits.engine import Identity
from django_ratelimits.models import Policy
from django_ratelimits.offenders import VIEW_PERMISSION

TEMPLATES = "admin/django_ratelimits/dashboard/"


def require(request: HttpRequest, *permissions: str) -> None:
    """403 unless the (active, staff: ``admin_view`` saw to that) user has every one
    of ``permissions``."""
    if not request.user.has_perms(permissions):
        raise PermissionDenied


def require_view(request: HttpRequest) -> None:
    require(request, VIEW_PERMISSION)


def admin_context(request: HttpRequest, site: AdminSite, title: str) -> dict[str, Any]:
    """What admin's base templates need (sidebar, header, breadcrumbs), and the title."""
    return {
        **site.each_context(request),
        "title": title,
        "opts": Policy._meta,
        "offenders_url": reverse(f"{site.name}:django_ratelimits_offenders"),
        "blocks_url": reverse(f"{site.name}:django_ratelimits_blocks"),
    }


def no_identity(request: HttpRequest, site: AdminSite, reason: str, status: int) -> HttpResponse:
    """The page for an identity no request could be counted as, with the reason."""
    context = {**admin_context(request, site, gettext("No such identity")), "reason": reason}
    return TemplateResponse(request, TEMPLATES + "no_identity.html", context, status=status)


def detail_url(site: AdminSite, identity: Identity) -> str:
    query = urlencode({"kind": identity.kind, "value": identity.value})
    return f"{reverse(f'{site.name}:django_ratelimits_offender')}?{query}"
