"""The offenders page's filters and the detail page's actions, validated.

A valid filter form gives the offenders service's
:class:`~django_ratelimits.offenders.Query` for one page; a valid action form, an
:class:`~django_ratelimits.offenders.Operation`.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import Any, cast

from django import forms
from django.core.exceptions import ValidationError
from django.http import QueryDict
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

from django_ratelimits.conf import get_settings, ip_network
from django_ratelimits.engine.offenders import SCAN_LIMIT, Order
from django_ratelimits.engine.overrides import BLOCKED_POLICY
from django_ratelimits.offenders import (
    DURATIONS,
    Action,
    NoSuchIdentity,
    Operation,
    Query,
    resolve,
)
from django_ratelimits.offenders.identities import VALUE_MAX, find_user

PER_PAGE = 25
# Pages reach as deep into the index as filters look (the reader reads every
# record above the page), so a deep page costs no more than a filtered one.
MAX_PAGE = SCAN_LIMIT // PER_PAGE

PERIODS = {
    300: _("last 5 minutes"),
    3600: _("last hour"),
    86_400: _("last 24 hours"),
}
DEFAULT_PERIOD = 3600
ORDERS = {"last": _("last seen"), "denials": _("denials")}
_HASHED_HELP = _("Addresses are stored hashed (HASH_IPS): this filter cannot match them.")
KIND_CHOICES = [
    ("", _("every kind")),
    ("ip", _("IP addresses")),
    ("user", _("users")),
    ("header", _("headers (API keys)")),
    ("key", _("custom keys")),
]


class FilterForm(forms.Form):
    """The GET form of the offenders page; every field is optional."""

    period = forms.TypedChoiceField(
        label=_("Period"),
        choices=list(PERIODS.items()),
        coerce=int,
        required=False,
        empty_value=None,
    )
    order = forms.ChoiceField(label=_("Sort by"), choices=list(ORDERS.items()), required=False)
    kind = forms.ChoiceField(label=_("Kind"), choices=KIND_CHOICES, required=False)
    policy = forms.ChoiceField(label=_("Policy"), required=False)
    ip = forms.CharField(
        label=_("IP or network"),
        required=False,
        max_length=64,
        widget=forms.TextInput(attrs={"placeholder": "203.0.113.0/24", "size": 18}),
    )
    user = forms.CharField(
        label=_("User"),
        required=False,
        max_length=150,
        help_text=_("A user name or id (the id of a deleted user too)."),
        widget=forms.TextInput(attrs={"size": 12}),
    )
    shown = forms.ChoiceField(
        label=_("Show"),
        choices=[
            ("", _("Offenders (denied)")),
            ("shadow", _("Would have been denied (shadow mode)")),
        ],
        required=False,
    )
    page = forms.IntegerField(min_value=1, required=False, widget=forms.HiddenInput)

    # Whether the user filter names the id of a user deleted since (set by is_valid()).
    user_gone = False

    def __init__(self, data: QueryDict, policies: Sequence[str]) -> None:
        data = data.copy()  # the defaults, so that the selects show them
        data.setdefault("period", str(DEFAULT_PERIOD))
        data.setdefault("order", "last")
        super().__init__(data)
        if get_settings().hash_ips:
            self.fields["ip"].help_text = _HASHED_HELP
        field = cast(forms.ChoiceField, self.fields["policy"])
        field.choices = [
            ("", _("every policy")),
            *((name, name) for name in policies),
            (BLOCKED_POLICY, _("blocked (by staff or a ban)")),
        ]

    def clean_ip(self) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
        text = self.cleaned_data["ip"].strip()
        if not text:
            return None
        if get_settings().hash_ips:
            raise ValidationError(
                _(
                    "Addresses are stored hashed (HASH_IPS), so no filter can match them. "
                    "Open an address's page from its row, or with manage.py ratelimits show."
                ),
                code="hashed",
            )
        try:
            return ip_network(text, strict=False)
        except ValueError:
            raise ValidationError(
                _("Enter an IP address or a network such as 203.0.113.0/24."), code="invalid"
            ) from None

    def clean_page(self) -> int:
        """Deeper pages than :data:`MAX_PAGE` show the last one there is."""
        return min(self.cleaned_data["page"] or 1, MAX_PAGE)

    def clean_user(self) -> str | None:
        """The id of the user named by id or username, or of a user deleted since, named
        by its id (what the limiter counted it as, say a deleted spam account's
        ``user:42``, stays in Redis until the retention): :attr:`user_gone` then says so.
        An id the user model's primary key cannot hold is no user's, deleted or not."""
        text = self.cleaned_data["user"].strip()
        if not text:
            return None
        try:
            pk, self.user_gone = find_user(text, former=True)
        except NoSuchIdentity:
            raise ValidationError(
                _("No user has this id or username (a deleted user is found by its id)."),
                code="no_user",
            ) from None
        return pk

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        kind = data.get("kind")
        if data.get("ip") and data.get("user"):
            raise ValidationError(_("Filter by IP or by user, not both."), code="conflict")
        if data.get("ip") and kind not in (None, "", "ip"):
            raise ValidationError(_("An IP filter shows IP addresses only."), code="conflict")
        if data.get("user") and kind not in (None, "", "user"):
            raise ValidationError(_("A user filter shows users only."), code="conflict")
        return data

    def query(self) -> Query:
        """The offenders service's query for the valid part of the form (conflicting
        filters left out), a page of :data:`PER_PAGE` rows. Call after is_valid()."""
        data = self.cleaned_data
        conflict = bool(self.non_field_errors())
        order: Order = "denials" if data.get("order") == "denials" else "last"
        return Query(
            period=data.get("period") or DEFAULT_PERIOD,
            order=order,
            kind=data.get("kind") or None,
            policy=data.get("policy") or None,
            network=None if conflict else data.get("ip"),
            user=None if conflict else data.get("user"),
            offset=((data.get("page") or 1) - 1) * PER_PAGE,
            limit=PER_PAGE,
            shadow=data.get("shown") == "shadow",
        )


class ActionForm(forms.Form):
    """One action on one identity, as the detail page's forms and the confirmation post it."""

    kind = forms.CharField(max_length=16)
    value = forms.CharField(max_length=VALUE_MAX, strip=False)
    # A callable: the labels are translated when the form is used, not once at import.
    action = forms.ChoiceField(choices=lambda: [(a.value, a.label) for a in Action])
    policy = forms.ChoiceField(label=_("Policy"), required=False)
    forget = forms.BooleanField(
        label=_("Also forget its offender record (it leaves the offenders list)"), required=False
    )
    seconds = forms.TypedChoiceField(
        label=pgettext_lazy("duration", "For"),
        choices=list(DURATIONS.items()),
        coerce=int,
        required=False,
        empty_value=None,
    )
    confirm = forms.BooleanField(required=False)
    # Where to go once done: the identity's page, or the active-blocks page.
    back = forms.ChoiceField(choices=[("", ""), ("blocks", "")], required=False)

    def __init__(self, data: Any, policies: Sequence[str]) -> None:
        super().__init__(data)
        field = cast(forms.ChoiceField, self.fields["policy"])
        field.choices = [("", _("every policy")), *((name, name) for name in policies)]

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        if "kind" in data and "value" in data:
            # A deleted user's data can be reset, lifted and forgotten by its id; one
            # that is gone is not blocked or allow-listed (nothing would be counted).
            former = data.get("action") not in (Action.BLOCK, Action.ALLOW)
            try:
                data["identity"] = resolve(data["kind"], data["value"], former_users=former)
            except NoSuchIdentity as exc:
                raise ValidationError(str(exc), code="identity") from None
        action = data.get("action")
        if action in (Action.BLOCK, Action.ALLOW) and not data.get("seconds"):
            self.add_error("seconds", _("Choose how long."))
        return data

    def identity_error(self) -> str:
        """Why the form names no identity (when ``cleaned_data`` has none)."""
        errors = [
            *self.non_field_errors(),
            *self.errors.get("kind", ()),
            *self.errors.get("value", ()),
        ]
        return str(errors[0]) if errors else str(_("This is not an identity."))

    def operation(self) -> Operation:
        """The operation asked for. Call after is_valid()."""
        data = self.cleaned_data
        action = Action(data["action"])
        return Operation(
            action=action,
            identity=data["identity"],
            policy=(data["policy"] or None) if action is Action.RESET else None,
            forget=bool(data["forget"]) if action is Action.RESET else False,
            seconds=data["seconds"] if action in (Action.BLOCK, Action.ALLOW) else None,
        )
