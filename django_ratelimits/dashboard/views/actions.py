"""The actions on one identity: a POST to ask, a confirmation page, a POST to do.

The first POST (from the detail page or the active-blocks page) renders the
confirmation, which warns when the identity is the admin's own; only a POST
carrying ``confirm`` acts, through the offenders service, and is written to
admin's history. Both need the view permission and the action's own one; a
GET is refused (405) and admin checks the CSRF token. An identity that no
request could be counted as is refused (400, with the reason).
"""

from __future__ import annotations

import logging
from typing import cast

from django.contrib import messages
from django.contrib.admin import AdminSite
from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.db import Error as DatabaseError
from django.db import router, transaction
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import translation
from django.utils.translation import gettext
from django.views.decorators.http import require_POST

from django_ratelimits.dashboard.forms import ActionForm
from django_ratelimits.dashboard.views.common import (
    TEMPLATES,
    admin_context,
    detail_url,
    no_identity,
    require,
    require_view,
)
from django_ratelimits.engine import Identity
from django_ratelimits.engine.errors import BackendError
from django_ratelimits.engine.keys import label
from django_ratelimits.identity import ip_identity
from django_ratelimits.offenders import (
    DURATIONS,
    Action,
    Offenders,
    Operation,
    UnknownPolicy,
    policy_names,
)
from django_ratelimits.policies.labels import kind_label
from django_ratelimits.policies.registry import current

logger = logging.getLogger("django_ratelimits")

# How admin's "Recent actions" marks each action: an override is added or deleted.
_FLAGS = {
    Action.RESET: CHANGE,
    Action.BLOCK: ADDITION,
    Action.ALLOW: ADDITION,
    Action.LIFT: DELETION,
    Action.FORGET: DELETION,
}


@require_POST
def offender_action(request: HttpRequest, site: AdminSite) -> HttpResponse:
    require_view(request)
    form = ActionForm(request.POST, policy_names())
    if not form.is_valid():
        identity = form.cleaned_data.get("identity")
        if identity is None:
            return no_identity(request, site, form.identity_error(), status=400)
        for errors in form.errors.values():
            for error in errors:
                messages.error(request, str(error))
        return HttpResponseRedirect(detail_url(site, identity))
    operation = form.operation()
    require(request, *operation.action.permissions)
    if form.cleaned_data["back"] == "blocks":
        back = reverse(f"{site.name}:django_ratelimits_blocks")
    else:
        back = detail_url(site, operation.identity)
    idle = operation.action in (Action.BLOCK, Action.ALLOW) and not current().counting(
        operation.identity.kind
    )
    if not form.cleaned_data["confirm"]:
        context = {
            **admin_context(request, site, gettext("Are you sure?")),
            "operation": operation,
            "kind": kind_label(operation.identity.kind),
            "duration": DURATIONS.get(operation.seconds or 0),
            "detail_url": back,
            "back": form.cleaned_data["back"],
            "own": own(request, operation.identity),
            "idle": idle,
        }
        return TemplateResponse(request, TEMPLATES + "confirm.html", context)
    try:
        done = Offenders().perform(operation, by=request.user.get_username())
    except BackendError as exc:
        messages.error(
            request, gettext("Nothing was done: Redis failed: %(error)s") % {"error": exc}
        )
        return HttpResponseRedirect(back)
    except UnknownPolicy as exc:  # the policy went away since the form was shown
        messages.error(request, gettext("Nothing was done: %(error)s") % {"error": exc})
        return HttpResponseRedirect(back)
    if not done:  # it ended, or another admin lifted it, since the page was shown
        messages.info(
            request,
            gettext("No block or allow-listing of %(identity)s was in force: nothing was lifted.")
            % {"identity": label(operation.identity)},
        )
        return HttpResponseRedirect(back)
    messages.success(request, operation.describe())
    try:  # in a savepoint: under ATOMIC_REQUESTS the request's transaction stays usable
        with transaction.atomic(using=router.db_for_write(LogEntry)):
            log(cast(int, request.user.pk), operation)
    except DatabaseError as exc:  # done in Redis all the same: say so, not a 500
        logger.error("could not write a dashboard action to admin's history: %s", exc)
        messages.warning(
            request,
            gettext("It was not written to admin's history: the database failed: %(error)s")
            % {"error": exc},
        )
    if idle:
        messages.warning(request, idle_warning(operation.identity.kind))
    return HttpResponseRedirect(back)


def idle_warning(kind: str) -> str:
    """What staff are told of a block or allow-listing that no enabled policy applies."""
    return gettext(
        "No enabled policy counts %(kind)s identities: no policy applies this until one does."
    ) % {"kind": kind_label(kind)}


def own(request: HttpRequest, identity: Identity) -> bool:
    """Whether ``identity`` is the admin's own: their client IP group, or their user."""
    if identity.kind == "ip":
        return identity == ip_identity(request)
    return identity.kind == "user" and identity.value == str(request.user.pk)


def log(user_id: int, operation: Operation) -> LogEntry:
    """Record ``operation`` in admin's history as the sentence that says what was done
    ("Blocked ip:203.0.113.7 for 5 minutes"), untranslated as admin stores it. No
    content type and no object: admin shows the sentence alone, with no link."""
    with translation.override(None):
        message = operation.describe()
    return LogEntry.objects.create(
        user_id=user_id,
        content_type=None,
        object_id=None,
        object_repr=message[:200],
        action_flag=_FLAGS[operation.action],
        change_message=message,
    )
