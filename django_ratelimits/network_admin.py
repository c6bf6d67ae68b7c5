"""Admin for blocked networks: a list to search and filter, and a form that will not lock
its own admin out without saying so.

The network is checked by the model (:func:`~django_ratelimits.policies.networks.parse_network`):
malformed text, host bits set and entries broader than a /8 (IPv4) or a /16 (IPv6)
are form errors. An enabled entry that holds the address the admin is saving from
(as the limiter sees it, trusted proxies included) is refused until *block my own
address too* is ticked. Searching for an address also finds the networks that hold it.
"""

from __future__ import annotations

import ipaddress
from typing import Any, cast

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from django_ratelimits.admin_search import BoundedSearch
from django_ratelimits.identity import client_address, parse_address
from django_ratelimits.models import BlockedNetwork, BlockedNetworkQuerySet, epoch_seconds
from django_ratelimits.policies import get_registry
from django_ratelimits.policies.networks import BROADEST_PREFIX, IPAddress, parse_network


class BlockedNetworkForm(forms.ModelForm):
    confirm_own_address = forms.BooleanField(
        label=_("Block my own address too"),
        required=False,
        help_text=_(
            "Needed when the network holds the address you are using now: saving it "
            "refuses your next request, this admin included."
        ),
    )
    request: HttpRequest | None = None

    class Meta:
        model = BlockedNetwork
        fields = ("network", "reason", "enabled", "expires_at")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        own = None if self.request is None else client_address(self.request)
        text = data.get("network")
        if own is None or not text or not data.get("enabled"):
            return data
        try:
            network = parse_network(text)
        except ValidationError:  # the model's clean() reports it on the field
            return data
        if own in network and not data.get("confirm_own_address"):
            self.add_error(
                "confirm_own_address",
                ValidationError(
                    _(
                        "%(network)s holds your own address, %(address)s: tick this box to "
                        "block it anyway (you will be refused too, until the entry expires "
                        "or is removed with manage.py ratelimits unblock-network)."
                    ),
                    code="own_address",
                    params={"network": str(network), "address": str(own)},
                ),
            )
        return data


class ExpiryFilter(admin.SimpleListFilter):
    title = _("in force")
    parameter_name = "in_force"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [("yes", _("Blocking now")), ("expired", _("Expired")), ("never", _("No expiry"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value == "yes":
            return cast(BlockedNetworkQuerySet, queryset).active()
        if value == "expired":
            return queryset.filter(expires_at__lte=timezone.now())
        if value == "never":
            return queryset.filter(expires_at__isnull=True)
        return queryset


@admin.register(BlockedNetwork)
class BlockedNetworkAdmin(BoundedSearch):
    form = BlockedNetworkForm
    fields = ("network", "reason", "enabled", "expires_at", "confirm_own_address")
    list_display = (
        "network",
        "enabled",
        "in_force",
        "reason",
        "expires_at",
        "created_by",
        "created_at",
    )
    list_filter = (ExpiryFilter, "enabled")
    search_fields = ("network", "reason")
    date_hierarchy = "created_at"
    list_select_related = ("created_by",)

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        form = super().get_form(request, obj, change, **kwargs)
        return type(form.__name__, (form,), {"request": request})

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if not change and request.user.is_authenticated:
            obj.created_by = request.user
        super().save_model(request, obj, form, change)

    @admin.display(boolean=True, description=_("in force"))
    def in_force(self, obj: BlockedNetwork) -> bool:
        """As the workers judge it (the hour a naive expiry shows twice read as theirs)."""
        expires = obj.expires_at
        return obj.enabled and (
            expires is None or epoch_seconds(expires) > get_registry().wall_clock()
        )

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        """Text matches, and for an address, every network that holds it."""
        found, duplicates = super().get_search_results(request, queryset, search_term)
        address = parse_address(search_term)
        if address is None:
            return found, duplicates
        return found | queryset.filter(network__in=_networks_holding(address)), duplicates


def _networks_holding(address: IPAddress) -> list[str]:
    """Every network an entry may name that holds ``address``, written as entries are
    stored (canonical, :func:`parse_network`): one per prefix from the broadest allowed
    to the address alone, at most 25 for IPv4 and 113 for IPv6. An index lookup, not a
    scan of the table."""
    return [
        str(ipaddress.ip_network((address, prefix), strict=False))
        for prefix in range(BROADEST_PREFIX[address.version], address.max_prefixlen + 1)
    ]
