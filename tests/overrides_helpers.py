"""Identity overrides made the way admin makes them, for tests of every layer."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone

from django_ratelimits.models import Policy, RateOverride


def override(
    ident: str, rates: str, *, policy: Policy | None, until: datetime | None = None
) -> RateOverride:
    """The override of ``ident`` (``<kind>:<value>``) to ``rates`` under ``policy`` (None:
    every policy), in force until ``until``, by default an hour from now."""
    kind, _, value = ident.partition(":")
    return RateOverride.objects.create(
        policy=policy,
        identity_kind=kind,
        identity_value=value,
        rates=rates,
        expires_at=until or timezone.now() + timedelta(hours=1),
        reason="test",
    )
