"""What the limiter decided, counted for a metrics backend (``docs/metrics.md``).

:mod:`django_ratelimits.decide` tells the :class:`Observer` of this process
what happened to each request: each applied policy's :class:`Outcome`, the
policies that allowed it with less than a tenth of their quota left, the ones
whose denial the local denial cache gave without Redis, how long the engine
call took, and whether the circuit breaker is open; the policy registry tells it
whether the database could be read at each refresh. ``DJANGO_RATELIMITS
["METRICS"]`` chooses the observer: ``False`` (the default) none, and then
:func:`observer` is ``None`` and a request pays one module lookup and a few
``is None`` tests; ``"prometheus"`` the counters of
:mod:`django_ratelimits.metrics.prometheus` (the ``prometheus`` extra).

Labels are policy names and outcomes only: never an address, a user or a
header a client sent, so a flood of new identities adds no series.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from typing import Final, Protocol

from django.core.signals import setting_changed
from django.dispatch import receiver

from django_ratelimits.conf import SETTING_NAME, get_settings
from django_ratelimits.engine import Decision
from django_ratelimits.policies.registry import refreshed
from django_ratelimits.policies.spec import PolicySpec

__all__ = [
    "NEAR_LIMIT_FRACTION",
    "Observer",
    "Outcome",
    "observer",
    "observing",
    "record_decision",
    "record_failure",
]

NEAR_LIMIT_FRACTION: Final = 10
"""An allowed request is near the limit when less than 1/10 of a limit's quota is left."""


class Outcome(StrEnum):
    """What one policy decided for one request (the ``outcome`` label)."""

    ALLOWED = "allowed"
    DENIED = "denied"
    SHADOW_DENIED = "shadow_denied"  # a shadow-mode policy would have denied it
    FAILED_OPEN = "failed_open"  # Redis could not decide: allowed
    FAILED_CLOSED = "failed_closed"  # Redis could not decide: refused (fail_closed)


class Observer(Protocol):
    """Where the decide layer reports; a metrics backend implements it."""

    def decided(self, policy: str, outcome: Outcome) -> None:
        """``policy`` decided ``outcome`` for one request."""

    def near_limit(self, policy: str) -> None:
        """``policy`` allowed a request with less than a tenth of a limit's quota left."""

    def cache_refused(self, policy: str) -> None:
        """``policy``'s denial came from the local denial cache, without Redis."""

    def engine_call(self, seconds: float) -> None:
        """One engine call (one request's round trip to Redis) took ``seconds``."""

    def breaker(self, is_open: bool) -> None:
        """The circuit breaker's state after an engine call succeeded or failed."""

    def policies_unread(self, failed: bool) -> None:
        """Whether the last refresh of the policies could not read the database (the
        worker then keeps those it read before, or code defaults alone)."""


_chosen: tuple[Observer | None] | None = None  # the settings' observer, once chosen
_override: Observer | None = None  # observing()'s


def observer() -> Observer | None:
    """The observer of this process: ``None`` when metrics are off."""
    if _override is not None:
        return _override
    chosen = _chosen
    if chosen is None:
        chosen = _choose()
    return chosen[0]


def _choose() -> tuple[Observer | None]:
    global _chosen
    found: Observer | None = None
    if get_settings().metrics == "prometheus":
        from django_ratelimits.metrics.prometheus import default_metrics

        found = default_metrics()
    _chosen = (found,)
    return _chosen


# A refresh that cannot read the database matches no request to a policy of its rows:
# no decision would tell the metrics, so the registry does.
@receiver(refreshed)
def _policies_refreshed(*, failed: bool, **kwargs: object) -> None:
    to = observer()
    if to is not None:
        to.policies_unread(failed)


@receiver(setting_changed)
def _settings_changed(*, setting: str, **kwargs: object) -> None:
    global _chosen
    if setting == SETTING_NAME:
        _chosen = None


@contextmanager
def observing(chosen: Observer) -> Iterator[Observer]:
    """Report to ``chosen`` until the block ends, whatever ``METRICS`` says (tests and
    benchmarks: a fresh registry each, no state left behind)."""
    global _override
    before, _override = _override, chosen
    try:
        yield chosen
    finally:
        _override = before


def record_decision(
    to: Observer,
    policies: tuple[PolicySpec, ...],
    decision: Decision,
    *,
    cached: bool,
    soft: frozenset[str] = frozenset(),
) -> None:
    """Each policy's outcome in ``decision``: denied (shadow-denied for a shadow policy)
    if one of its results was, else allowed, and near the limit if a result had less
    than a tenth of its quota left. ``cached``: the denial cache answered; it gives only
    the cached denials, so an enforced policy of ``policies`` with no result there (it
    did not deny: another policy's denial refused the request) counts allowed, as when
    Redis answers; a shadow policy, or one named in ``soft`` (``block=False``), which the
    cache does not look at, is not counted then."""
    shadow = {p.name: p.shadow for p in policies}
    denied: set[str] = set()
    allowed: set[str] = set()
    near: set[str] = set()
    for result in decision.results:
        name = result.limit.policy
        if not result.allowed:
            denied.add(name)
            continue
        allowed.add(name)
        if result.remaining * NEAR_LIMIT_FRACTION < result.limit.capacity:
            near.add(name)
    for name in denied:
        if shadow[name]:
            to.decided(name, Outcome.SHADOW_DENIED)
        else:
            to.decided(name, Outcome.DENIED)
            if cached:
                to.cache_refused(name)
    for name in allowed - denied:
        to.decided(name, Outcome.ALLOWED)
        if name in near:
            to.near_limit(name)
    if cached:
        for policy in policies:
            name = policy.name
            if not (policy.shadow or name in soft or name in denied or name in allowed):
                to.decided(name, Outcome.ALLOWED)


def record_failure(to: Observer, policies: tuple[PolicySpec, ...]) -> None:
    """Redis could not decide: each policy failed closed (an enforced ``fail_closed``
    one, which refuses the request) or open."""
    for policy in policies:
        closed = policy.fail_closed and not policy.shadow
        to.decided(policy.name, Outcome.FAILED_CLOSED if closed else Outcome.FAILED_OPEN)
