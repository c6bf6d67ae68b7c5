"""Admin for tiers (inline on the policy form) and identity overrides (their own list).

A tier or an override is saved only with rates that parse (a form error
otherwise). An override's identity is typed as staff type it on the offender
dashboard (``ip:203.0.113.7``, ``user:alice``, ``header:KEY``) and stored as the
limiter counts it (:func:`django_ratelimits.offenders.identities.parse`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from django import forms
from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from django_ratelimits.admin_search import BoundedSearch
from django_ratelimits.dashboard.present import user_labels
from django_ratelimits.engine import Identity
from django_ratelimits.models import PolicyTier, RateOverride, epoch_seconds
from django_ratelimits.offenders.identities import (
    NoSuchIdentity,
    counted_overrides,
    find_user,
    override_who,
    parse,
)
from django_ratelimits.policies import get_registry
from django_ratelimits.policies.labels import kind_label
from django_ratelimits.policies.tiers import Tier


def tier_who(tier: Tier) -> str:
    """Whom ``tier`` matches, in words, for the policy's preview."""
    if tier.group:
        # Translators: in the policy preview, "Signed-in users %(who)s instead: ...".
        return gettext("in the group “%(group)s”") % {"group": tier.group}
    path = ".".join(tier.attribute)
    # Translators: in the policy preview, "Signed-in users %(who)s instead: ..."; %(path)s
    # is an attribute of the user such as profile.plan.
    return gettext("whose %(path)s is “%(value)s”") % {"path": path, "value": tier.value}


class PolicyTierInline(admin.TabularInline):
    model = PolicyTier
    extra = 0
    max_num = 20  # tried in order on each request: a short list
    validate_max = True
    fields = ("order", "match", "name", "value", "rates")


class RateOverrideForm(forms.ModelForm):
    identity = forms.CharField(
        label=_("identity"),
        max_length=1100,
        help_text=_("kind:value, e.g. ip:203.0.113.7, user:alice, header:THE-API-KEY."),
    )

    class Meta:
        model = RateOverride
        fields = ("identity", "policy", "rates", "expires_at", "reason")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The identity saved, as the row holds it (None on the add form).
        self.saved: Identity | None = None
        if self.instance.pk:
            self.initial["identity"] = str(self.instance)
            self.saved = Identity(self.instance.identity_kind, self.instance.identity_value)
            if self._user_gone(self.saved):
                self.fields["identity"].help_text = _(
                    "No user has this id any more (deleted): no request is counted as it, "
                    "so this override applies to nothing. Its rates, expiry and reason "
                    "can still be changed, or it can be deleted."
                )

    def clean_identity(self) -> str:
        """What staff typed, resolved as the limiter counts it. A user must exist, with
        one exception: an override saved for a user deleted since keeps its identity
        when edited (its rates, expiry or reason changed), as
        ``ratelimits unoverride`` still reaches it. A new override, or one moved to
        another identity, for an id no user has is refused: nothing would be counted as
        it, and an id mistyped could not be told from a deleted user's."""
        text: str = self.cleaned_data["identity"]
        try:
            identity = parse(text.strip())
        except NoSuchIdentity as exc:
            kept = self._kept(text.strip())
            if kept is None:
                raise forms.ValidationError(str(exc), code="no_such_identity") from None
            identity = kept
        self.instance.identity_kind, self.instance.identity_value = identity.kind, identity.value
        return text

    def _kept(self, text: str) -> Identity | None:
        """The saved identity, if ``text`` names it and it is a user deleted since."""
        if self.saved is None or self.saved.kind != "user":
            return None
        try:
            identity = parse(text, former_users=True)
        except NoSuchIdentity:
            return None
        return identity if identity == self.saved else None

    @staticmethod
    def _user_gone(identity: Identity) -> bool:
        if identity.kind != "user":
            return False
        try:
            return find_user(identity.value, former=True)[1]
        except NoSuchIdentity:  # not even an id the primary key can hold
            return True


class ExpiryFilter(admin.SimpleListFilter):
    title = _("expiry")
    parameter_name = "expiry"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        # Not "in force": an override not expired may still match no request (an IP
        # counted otherwise since, a user deleted since); the list's column says which.
        return [("active", _("not expired")), ("expired", _("expired"))]

    def queryset(
        self, request: HttpRequest, queryset: QuerySet[RateOverride]
    ) -> QuerySet[RateOverride]:
        if self.value() == "active":
            return queryset.filter(expires_at__gt=timezone.now())
        if self.value() == "expired":
            return queryset.filter(expires_at__lte=timezone.now())
        return queryset


class IdentityKindFilter(admin.SimpleListFilter):
    """The kinds of identity the overrides name, called as the dashboard calls them
    (*IP*, *User*, translated), not by the value stored (``ip``, ``user``). The same
    parameter as admin's own filter of the field, so its links keep working."""

    title = _("identity kind")
    parameter_name = "identity_kind"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        rows = model_admin.get_queryset(request)
        kinds = rows.order_by("identity_kind").values_list("identity_kind", flat=True).distinct()
        return [(kind, kind_label(kind)) for kind in kinds]

    def queryset(
        self, request: HttpRequest, queryset: QuerySet[RateOverride]
    ) -> QuerySet[RateOverride]:
        kind = self.value()
        return queryset if kind is None else queryset.filter(identity_kind=kind)


@dataclass(frozen=True)
class Shown:
    """An override as its list shows it: its identity, and whether the limiter counts
    requests as that identity now."""

    text: str  # "ip:203.0.113.7", "user:42", or "user 42 (no longer exists)"
    counted: bool


SHOWN: Final = "_ratelimits_shown"  # the attribute the list sets on each row of its page


def shown(rows: Iterable[RateOverride]) -> dict[int, Shown]:
    """How the list shows ``rows``, by primary key: a user deleted since as the dashboard
    names one (``user 42 (no longer exists)``), and not counted. One query for all the
    rows' users (:func:`~django_ratelimits.offenders.users.users`); when it fails, no
    user is called gone."""
    rows = list(rows)
    known, counted = counted_overrides(rows)
    labels = user_labels(known)
    found = {}
    for row in rows:
        who = override_who(row)
        found[row.pk] = Shown(labels[who] if who in known.gone else str(row), counted[row.pk])
    return found


@admin.register(RateOverride)
class RateOverrideAdmin(BoundedSearch):
    form = RateOverrideForm
    list_display = (
        "identity_shown",
        "policy",
        "rates",
        "expires_at",
        "in_force",
        "reason",
        "created_by",
    )
    list_filter = (ExpiryFilter, IdentityKindFilter, "policy")
    search_fields = ("identity_value", "reason", "policy__name")
    list_select_related = ("policy", "created_by")

    def get_changelist_instance(self, request: HttpRequest) -> ChangeList:
        """The list, each row of its page told how it is shown (:func:`shown`): the
        columns see one row at a time, and must not ask for its user one by one."""
        changelist = super().get_changelist_instance(request)
        page = list(changelist.result_list)  # runs the page's query; its rows stay cached
        seen = shown(page)
        for row in page:
            setattr(row, SHOWN, seen[row.pk])
        return changelist

    @staticmethod
    def _shown(obj: RateOverride) -> Shown:
        seen = getattr(obj, SHOWN, None)
        return seen if isinstance(seen, Shown) else shown([obj])[obj.pk]

    @admin.display(description=_("identity override"))
    def identity_shown(self, obj: RateOverride) -> str:
        """``kind:value`` as staff type it; a user deleted since as the dashboard names it."""
        return self._shown(obj).text

    @admin.display(description=_("in force"), boolean=True)
    def in_force(self, obj: RateOverride) -> bool:
        """Not expired, and an identity the limiter counts now: not an IP saved before
        ``HASH_IPS`` or the prefixes changed (check W012), nor a user deleted since
        (nothing authenticates as it)."""
        clock = get_registry().wall_clock()  # as the workers judge the expiry
        return epoch_seconds(obj.expires_at) > clock and self._shown(obj).counted

    def save_model(self, request: HttpRequest, obj: RateOverride, form: Any, change: bool) -> None:
        if not change and request.user.is_authenticated:
            obj.created_by = request.user
        super().save_model(request, obj, form, change)
