"""The actions of the detail page: a POST to ask, a confirmation page, a POST to do.

The first POST (from the detail page) renders the confirmation; only a POST
carrying ``confirm`` acts, through the offenders service, and is written to
admin's history. Both need the view permission and the action's own one; a
GET is refused (405) and admin checks the CSRF token.
"""

from __future__ import annotations

from typing import cast

from django.contrib import messages
from django.contrib.admin import AdminSite
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.utils import translation
from django.utils.translation import gettext
from django.views.decorators.http import require_POST

from django_ratelimits.dashboard.forms import ActionForm
from django_ratelimits.dashboard.present import kind_label
from django_ratelimits.dashboard.views.common import (
    TEMPLATES,
    admin_context,
    detail_url,
    require,
    require_view,
)
from django_ratelimits.engine.errors import BackendError
from django_ratelimits.models import Policy
from django_ratelimits.offenders import DURATIONS, Offenders, Operation, UnknownPolicy, policy_names


@require_POST
def offender_action(request: HttpRequest, site: AdminSite) -> HttpResponse:
    require_view(request)
    form = ActionForm(request.POST, policy_names())
    if not form.is_valid():
        identity = form.cleaned_data.get("identity")
        if identity is None:
            return HttpResponseBadRequest(gettext("This is not an identity."))
        for errors in form.errors.values():
            for error in errors:
                messages.error(request, str(error))
        return HttpResponseRedirect(detail_url(site, identity))
    operation = form.operation()
    require(request, operation.action.permission)
    back = detail_url(site, operation.identity)
    if not form.cleaned_data["confirm"]:
        context = {
            **admin_context(request, site, gettext("Are you sure?")),
            "operation": operation,
            "kind": kind_label(operation.identity.kind),
            "duration": DURATIONS.get(operation.seconds or 0),
            "detail_url": back,
        }
        return TemplateResponse(request, TEMPLATES + "confirm.html", context)
    try:
        Offenders().perform(operation)
    except BackendError as exc:
        messages.error(
            request, gettext("Nothing was done: Redis failed: %(error)s") % {"error": exc}
        )
        return HttpResponseRedirect(back)
    except UnknownPolicy as exc:  # the policy went away since the form was shown
        messages.error(request, gettext("Nothing was done: %(error)s") % {"error": exc})
        return HttpResponseRedirect(back)
    log(cast(int, request.user.pk), operation)
    messages.success(request, operation.describe())
    return HttpResponseRedirect(back)


def log(user_id: int, operation: Operation) -> LogEntry:
    """Record ``operation`` in admin's history (a ``LogEntry`` against the policy
    model, with no object, so "Recent actions" shows the identity as plain text),
    untranslated as admin stores it."""
    with translation.override(None):
        message = operation.describe()
    return LogEntry.objects.create(
        user_id=user_id,
        content_type=ContentType.objects.get_for_model(Policy),
        object_id=None,
        object_repr=operation.who[:200],
        action_flag=CHANGE,
        change_message=message,
    )
