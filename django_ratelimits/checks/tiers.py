"""W011: a tier that names a group which does not exist matches nobody.

Admin refuses such a tier when it is saved; the group can be deleted or renamed
afterwards, and its users then quietly get the policy's own rates.
"""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.core.checks import CheckMessage, Warning, register

from django_ratelimits.checks.common import TAG
from django_ratelimits.checks.policies import _rows
from django_ratelimits.models import PolicyTier


@register(TAG)
def check_tier_groups(**kwargs: Any) -> list[CheckMessage]:
    """W011, one per tier naming a missing group (nothing when the tables cannot be read)."""
    if not apps.is_installed("django.contrib.auth"):
        return []
    from django.contrib.auth.models import Group

    missing = (
        PolicyTier.objects.filter(match=PolicyTier.GROUP)
        .exclude(name__in=Group.objects.values("name"))
        .values_list("policy__name", "name")
    )
    rows, _error = _rows(missing)
    return [
        Warning(
            f"A tier of the rate-limit policy {policy!r} names the group {group!r}, which "
            "does not exist: it matches nobody, and those users get the policy's own rates.",
            hint="Create the group, or change the tier in the policy's admin page.",
            id="django_ratelimits.W011",
        )
        for policy, group in rows
    ]
