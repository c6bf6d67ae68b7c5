"""W012: an IP override stored in a form the settings no longer count applies to nothing.

An identity override keeps an IP as the limiter counted it when the override was
saved (``203.0.113.5``, ``203.0.113.0/24``, or ``h:`` and a hash with ``HASH_IPS``).
Turning ``HASH_IPS`` on or off, or changing ``IPV4_PREFIX`` or ``IPV6_PREFIX``, makes
the limiter count another value: the row still reads as an override in admin, and
never matches a request again. A change of the hashing secret cannot be seen this way
(a hash has the same form under every secret): ``docs/privacy.md`` says what it does.
"""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Warning, register
from django.utils import timezone

from django_ratelimits.checks.common import TAG, valid_settings
from django_ratelimits.checks.policies import _rows
from django_ratelimits.engine import Identity
from django_ratelimits.models import RateOverride
from django_ratelimits.offenders.identities import counted_now


@register(TAG)
def check_ip_overrides(**kwargs: Any) -> list[CheckMessage]:
    """W012, one per unexpired IP override the limiter no longer counts (nothing when
    the settings are invalid, E002, or the table cannot be read)."""
    if valid_settings() is None:
        return []
    query = RateOverride.objects.filter(
        identity_kind__in=("ip", "ip_username"), expires_at__gt=timezone.now()
    ).select_related("policy")
    rows, _error = _rows(query)
    return [
        Warning(
            f"The identity override of {row} under "
            f"{repr(row.policy.name) if row.policy else 'every policy'} ({row.rates}) "
            "names the IP as it was counted before HASH_IPS, IPV4_PREFIX or IPV6_PREFIX "
            "changed: the limiter counts another value now, so it applies to no request.",
            hint="Open the override in admin (Identity overrides) and save it: the address "
            "is stored as counted now. An ip:h:... value cannot be turned back into its "
            "address: type the address instead, or delete the override.",
            obj=row,
            id="django_ratelimits.W012",
        )
        for row in rows
        if not counted_now(Identity(row.identity_kind, row.identity_value))
    ]
