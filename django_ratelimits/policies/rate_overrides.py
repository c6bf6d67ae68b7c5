"""Identity overrides: one identity's own rates under a policy (or all), until a time.

Each :class:`RateOverride` row compiles to a :class:`OwnRates`; the registry
compiles them all into one :class:`OverrideTable` at each reload, so that the
request path asks a dict, never the database. An override for every policy is
expanded into each policy that counts identities of its kind, but concurrency and
failed-login policies (:func:`_spared`); an override for one policy wins over one
for every policy. Expired overrides are not loaded,
and one that expires after the load stops applying at its ``expires_at``
(the registry's wall clock), without an edit.

Memory: one entry per (override, policy it applies to).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django_ratelimits.engine import Algorithm, Identity, Limit
from django_ratelimits.policies.spec import PolicySpec
from django_ratelimits.rates import Rate

__all__ = ["OverrideTable", "OwnRates"]


@dataclass(frozen=True)
class OwnRates:
    """``identity``'s rates under ``policy`` (empty: every policy) until ``expires_at``
    (seconds since the epoch)."""

    identity: Identity
    rates: tuple[Rate, ...]
    expires_at: float
    policy: str = ""


class OverrideTable:
    """The overrides in force, by (policy name, identity): one dict lookup per check."""

    def __init__(self, overrides: Iterable[OwnRates], specs: Iterable[PolicySpec]) -> None:
        by_name = {spec.name: spec for spec in specs}
        # Per (policy, identity), every override that names it, the one that wins first:
        # one for a single policy before one for every policy, then the newest (they come
        # oldest first). The first not yet expired applies, so an override that ends
        # before another it hides gives way to it, with no reload.
        table: dict[tuple[str, Identity], list[tuple[tuple[Limit, ...], float]]] = {}
        for own in sorted(reversed(list(overrides)), key=lambda o: not o.policy):
            names = [own.policy] if own.policy else list(by_name)
            for name in names:
                spec = by_name.get(name)
                if spec is not None and own.identity.kind in spec.key.identity_kinds:
                    if not own.policy and _spared(spec):
                        continue
                    found = table.setdefault((name, own.identity), [])
                    found.append((spec.limits_of(own.rates), own.expires_at))
        self._table = table

    def __len__(self) -> int:
        return len(self._table)

    def limits(self, policy: str, identity: Identity, now: float) -> tuple[Limit, ...] | None:
        """``identity``'s own limits under ``policy`` at ``now``, None if it has none."""
        for limits, until in self._table.get((policy, identity), ()):
            if until > now:
                return limits
        return None


def _spared(spec: PolicySpec) -> bool:
    """Whether an override for every policy leaves ``spec`` alone: a concurrency policy
    (rates over time are not slots), and a failed-login policy (rates of requests are not
    a number of password guesses: raising a partner's API rates for every policy would
    lift its address's login lockout). An override naming the policy applies to it."""
    return spec.algorithm is Algorithm.CONCURRENCY or spec.failed_logins
