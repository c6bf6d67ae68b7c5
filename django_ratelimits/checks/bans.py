"""E010: a policy's escalating ban is inconsistent (docs/bans.md).

A ban declared in code (``@ratelimit(..., ban_after=...)``) that the ban rules
refuse is left out of the policy: the policy limits, but never bans. A row
whose ban fields were saved around admin's validation (a bulk update, SQL)
does not compile: the registry skips the whole policy. Both are errors here.
"""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error, register
from django.core.exceptions import ValidationError
from django.db.models import Q

from django_ratelimits.checks.common import TAG
from django_ratelimits.checks.policies import _rows
from django_ratelimits.models import Policy
from django_ratelimits.policies.parse import parse_ban
from django_ratelimits.policies.registry import get_registry

_HINT = "Correct the ban in admin or in the decorator; docs/bans.md states its bounds."


@register(TAG)
def check_bans(**kwargs: Any) -> list[CheckMessage]:
    found: list[CheckMessage] = [
        Error(
            f"Code declares the rate-limit policy {name!r} with a ban it cannot have: "
            f"{_reasons(error)} The policy is enforced without a ban.",
            hint=_HINT,
            obj=f"policy {name!r}",
            id="django_ratelimits.E010",
        )
        for name, error in sorted(get_registry().refused_bans().items())
    ]
    banning = Q(ban_after__gt=0) | ~Q(ban_within="") | ~Q(ban_for="") | ~Q(ban_max="")
    rows, _ = _rows(Policy.objects.filter(banning).order_by("name"))
    for row in rows:
        try:
            parse_ban(row.ban_after, row.ban_within, row.ban_for, row.ban_max)
        except ValidationError as error:
            found.append(
                Error(
                    f"Rate-limit policy {row.name!r} has a ban it cannot have: "
                    f"{_reasons(error)} While enabled, the policy is skipped: it limits nothing.",
                    hint=_HINT,
                    obj=row,
                    id="django_ratelimits.E010",
                )
            )
    return found


def _reasons(error: ValidationError) -> str:
    return " ".join(
        f"{field}: {' '.join(messages)}" for field, messages in error.message_dict.items()
    )
