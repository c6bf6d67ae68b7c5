"""One identity's page: its record, who was behind it, its quotas, its hits, the actions."""

from __future__ import annotations

from typing import Any

from django.contrib.admin import AdminSite
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.http import urlencode
from django.utils.translation import gettext

from django_ratelimits.dashboard.present import (
    activity,
    addresses,
    denied_by,
    display_name,
    hit_views,
    kind_label,
    override_text,
    quota_views,
    to_datetime,
    user_labels,
    who_view,
)
from django_ratelimits.dashboard.views.common import (
    TEMPLATES,
    admin_context,
    detail_url,
    no_identity,
    require_view,
)
from django_ratelimits.engine import Identity
from django_ratelimits.engine.errors import BackendError
from django_ratelimits.engine.hits import read_as
from django_ratelimits.engine.keys import label
from django_ratelimits.offenders import (
    DURATIONS,
    Action,
    IdentityReport,
    NoSuchIdentity,
    Offenders,
    policy_names,
    resolve,
    users,
)

SHOWN_HITS = 200  # rows of the hits table (the metadata list may be longer)
SHOWN_BEHIND = 100  # rows of the "users behind" table


def offender_detail(request: HttpRequest, site: AdminSite) -> HttpResponse:
    require_view(request)
    kind, value = request.GET.get("kind", ""), request.GET.get("value", "")
    try:
        identity, gone = _identity(kind, value)
    except NoSuchIdentity as exc:
        return no_identity(request, site, str(exc), status=404)
    context = {
        **admin_context(request, site, label(identity)),
        "identity": identity,
        "kind": kind_label(identity.kind),
        **_actions(request, site),
        "gone": gone,
        "override_url": None if gone else _override_url(request, site, identity),
    }
    try:
        report = Offenders().inspect(identity)
    except BackendError as exc:
        context["error"] = gettext("Could not read this identity from Redis: %(error)s") % {
            "error": exc
        }
        return TemplateResponse(request, TEMPLATES + "detail.html", context)
    context.update(_report(report, site))
    return TemplateResponse(request, TEMPLATES + "detail.html", context)


def _report(report: IdentityReport, site: AdminSite) -> dict[str, Any]:
    """What the page shows of what Redis said; long lists cut to what is shown."""
    detail, offender = report.detail, report.detail.offender
    everyone = detail.behind()
    seen_with, hits = everyone[:SHOWN_BEHIND], detail.hits[:SHOWN_HITS]
    me, own = label(report.identity), read_as(report.identity)
    chart = activity(detail.hits, report.now_ms)
    known = users([own, *(who for who, _ in seen_with), *(hit.who for hit in hits)])
    names = user_labels(known)
    names.update(addresses(detail.hits, me))

    def url_for(other: Identity) -> str:
        return detail_url(site, other)

    return {
        "name": display_name(own, names),
        "offender": offender,
        "first_denied": to_datetime(offender.first_ms) if offender else None,
        "last_denied": to_datetime(offender.last_ms) if offender else None,
        "denied_by": denied_by(offender) if offender else (),
        "shadow": detail.shadow,
        "would_deny": denied_by(detail.shadow) if detail.shadow else (),
        "override": detail.override,
        "override_text": override_text(detail.override),
        "behind": [who_view(who, count, names, url_for, known.ids) for who, count in seen_with],
        "more_behind": len(everyone) - len(seen_with),
        "quotas": quota_views(report.quotas),
        "overridden": sorted(report.overridden),
        "tiered": sorted(report.tiered),
        "chart": chart.chart(),
        "hits": hit_views(hits, report.now_ms, names, url_for, known.ids),
        "more_hits": len(detail.hits) - len(hits),
    }


def _identity(kind: str, value: str) -> tuple[Identity, bool]:
    """The identity named, and whether it is the id of a user deleted since: its page
    shows what Redis holds, to reset, lift or forget (not block or allow-list)."""
    try:
        return resolve(kind, value), False
    except NoSuchIdentity:
        if kind != "user":
            raise
    return resolve(kind, value, former_users=True), True


def _override_url(request: HttpRequest, site: AdminSite, identity: Identity) -> str | None:
    """Admin's form to give ``identity`` its own rates, if this user may add overrides."""
    if not request.user.has_perm("django_ratelimits.add_rateoverride"):
        return None
    url = reverse(f"{site.name}:django_ratelimits_rateoverride_add")
    return f"{url}?{urlencode({'identity': label(identity)})}"


def _actions(request: HttpRequest, site: AdminSite) -> dict[str, Any]:
    """What the action forms need, and which of them this user may use."""
    user = request.user
    return {
        "action_url": reverse(f"{site.name}:django_ratelimits_offender_action"),
        "can_reset": user.has_perms(Action.RESET.permissions),
        "can_forget": user.has_perms(Action.FORGET.permissions),
        "can_block": user.has_perms(Action.BLOCK.permissions),
        "policy_names": policy_names(),
        "durations": list(DURATIONS.items()),
    }
