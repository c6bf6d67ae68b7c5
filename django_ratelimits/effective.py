"""The limits one identity gets under one policy for one request.

Precedence: the identity's override (:mod:`~django_ratelimits.policies.rate_overrides`)
wins, then the first of the policy's tiers that the request's user matches
(:mod:`~django_ratelimits.policies.tiers`), then the policy's own rates. The
override is a dict lookup in the registry. A tier is chosen once per request
and policy; a group tier reads the user's group names once per request (one
database query, the only one tiers add; an attribute path may add the
project's own, e.g. a related ``profile``). Async code calls :func:`prepare`
off the event loop first, so that those reads never run on it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.http import HttpRequest

from django_ratelimits.engine import Identity, Limit
from django_ratelimits.policies.registry import PolicyRegistry
from django_ratelimits.policies.spec import PolicySpec

__all__ = ["limits_for", "prepare"]

_TIERS = "_ratelimits_tiers"
_GROUPS = "_ratelimits_groups"


def limits_for(
    registry: PolicyRegistry, request: HttpRequest, policy: PolicySpec, identity: Identity
) -> tuple[Limit, ...]:
    """The limits ``identity`` is checked against under ``policy`` for ``request``."""
    own = registry.own_limits(policy.name, identity)
    if own is not None:
        return own
    if policy.tiers:
        tier = _tier(request, policy)
        if tier is not None:
            return policy.tier_limits[tier]
    return policy.limits


def prepare(request: HttpRequest, policies: Iterable[PolicySpec]) -> None:
    """Choose the tiers of ``policies`` for ``request`` now (the database reads they need)."""
    for policy in policies:
        if policy.tiers:
            _tier(request, policy)


def _tier(request: HttpRequest, policy: PolicySpec) -> int | None:
    """The index of the first tier of ``policy`` that the request's user matches."""
    chosen: dict[str, int | None] = request.__dict__.setdefault(_TIERS, {})
    if policy.name not in chosen:
        user = getattr(request, "user", None)
        found = None
        if user is not None and user.is_authenticated:
            groups = _groups(request, user) if any(t.group for t in policy.tiers) else ()
            found = next((i for i, t in enumerate(policy.tiers) if t.matches(user, groups)), None)
        chosen[policy.name] = found
    return chosen[policy.name]


def _groups(request: HttpRequest, user: Any) -> frozenset[str]:
    """The names of ``user``'s groups, read once per request (none without ``groups``)."""
    names: frozenset[str] | None = request.__dict__.get(_GROUPS)
    if names is None:
        manager = getattr(user, "groups", None)
        names = (
            frozenset(manager.values_list("name", flat=True))
            if manager is not None
            else frozenset()
        )
        request.__dict__[_GROUPS] = names
    return names
