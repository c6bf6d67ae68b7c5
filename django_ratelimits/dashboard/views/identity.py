"""One identity's page: its record, who was behind it, its quotas, its hits, the actions."""

from __future__ import annotations

from typing import Any

from django.contrib.admin import AdminSite
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.translation import gettext

from django_ratelimits.dashboard.actions import DURATIONS, Action
from django_ratelimits.dashboard.present import (
    activity,
    behind,
    display_name,
    hit_views,
    kind_label,
    override_text,
    policy_label,
    quota_views,
    to_datetime,
)
from django_ratelimits.dashboard.services import identity_report, policy_names, user_names
from django_ratelimits.dashboard.views.common import (
    TEMPLATES,
    admin_context,
    detail_url,
    require_view,
)
from django_ratelimits.engine import Identity
from django_ratelimits.engine.keys import label
from django_ratelimits.exceptions import BackendError

SHOWN_HITS = 200  # rows of the hits table (the metadata list may be longer)
VALUE_MAX = 1000


def offender_detail(request: HttpRequest, site: AdminSite) -> HttpResponse:
    require_view(request)
    identity = identity_from(request.GET)
    context = {
        **admin_context(request, site, label(identity)),
        "identity": identity,
        "kind": kind_label(identity.kind),
        **_actions(request, site),
    }
    try:
        report = identity_report(identity)
    except BackendError as exc:
        context["error"] = gettext("Could not read this identity from Redis: %(error)s") % {
            "error": exc
        }
        return TemplateResponse(request, TEMPLATES + "detail.html", context)
    detail = report.detail
    names = user_names([label(identity), *(hit.who for hit in detail.hits)])

    def url_for(other: Identity) -> str:
        return detail_url(site, other)

    offender = detail.offender
    context.update(
        name=display_name(label(identity), names),
        offender=offender,
        first_denied=to_datetime(offender.first_ms) if offender else None,
        last_denied=to_datetime(offender.last_ms) if offender else None,
        denied_by=[
            (policy_label(name), count)
            for name, count in sorted(offender.by_policy.items(), key=lambda i: (-i[1], i[0]))
        ]
        if offender
        else [],
        override=detail.override,
        override_text=override_text(detail.override),
        behind=behind(detail, names, url_for),
        quotas=quota_views(report.quotas),
        chart=activity(detail.hits, report.now_ms).svg(
            "rl-activity", gettext("Requests per second")
        ),
        hits=hit_views(detail.hits[:SHOWN_HITS], report.now_ms, names, url_for),
        more_hits=max(0, len(detail.hits) - SHOWN_HITS),
    )
    return TemplateResponse(request, TEMPLATES + "detail.html", context)


def identity_from(query: QueryDict) -> Identity:
    """The identity that ``?kind=...&value=...`` names; 404 if it names none."""
    kind, value = query.get("kind", ""), query.get("value", "")
    if not value or len(value) > VALUE_MAX:
        raise Http404("no such identity")
    try:
        return Identity(kind, value)
    except ValueError:
        raise Http404("no such identity") from None


def _actions(request: HttpRequest, site: AdminSite) -> dict[str, Any]:
    """What the action forms need, and which of them this user may use."""
    user = request.user
    return {
        "action_url": reverse(f"{site.name}:django_ratelimits_offender_action"),
        "can_reset": user.has_perm(Action.RESET.permission),
        "can_block": user.has_perm(Action.BLOCK.permission),
        "policy_names": policy_names(),
        "durations": list(DURATIONS.items()),
    }
