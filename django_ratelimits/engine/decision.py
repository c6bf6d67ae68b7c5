"""What the engine answers: one result per (identity, limit), and the whole."""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter

from django_ratelimits.engine.concurrency import Held
from django_ratelimits.engine.limits import Identity, Limit
from django_ratelimits.frozen import quick_init


@quick_init
@dataclass(frozen=True)
class LimitResult:
    """The outcome of one limit for one identity.

    ``remaining`` is the quota left after this request if it was allowed, or
    the quota left now if it was denied. ``retry_after_us`` is how long until
    the same request would be allowed (0 when allowed); ``reset_after_us`` how
    long until the quota is whole again if no request comes. Both are measured
    on Redis' clock, in microseconds. ``blocked``: denied by a block staff set
    (until ``retry_after_us`` from now), not by the limit. ``held_back``: a failed
    login's look refused only because the identity's logins in flight fill the limit
    (:attr:`Check.reserve <django_ratelimits.engine.Check.reserve>`): no denial is
    recorded for it, and the worker's cache of denials does not learn it.
    """

    identity: Identity
    limit: Limit
    allowed: bool
    remaining: int
    retry_after_us: int
    reset_after_us: int
    blocked: bool = False
    held_back: bool = False

    @property
    def retry_after(self) -> float:
        """Seconds until the same request would be allowed."""
        return self.retry_after_us / 1_000_000

    @property
    def reset_after(self) -> float:
        """Seconds until the quota is whole again."""
        return self.reset_after_us / 1_000_000


@quick_init
@dataclass(frozen=True)
class Decision:
    """Everything one engine call decided, and Redis' time when it decided.

    ``held``: the concurrency slots the call took, to release when the request
    ends (:meth:`Engine.release <django_ratelimits.engine.core.Engine.release>`);
    none when no concurrency limit admitted it.
    """

    results: tuple[LimitResult, ...]
    now_us: int
    held: tuple[Held, ...] = ()

    @property
    def allowed(self) -> bool:
        return all(map(_ALLOWED, self.results))  # no generator: asked 3 times a request

    @property
    def denied(self) -> tuple[LimitResult, ...]:
        return tuple(r for r in self.results if not r.allowed)

    @property
    def retry_after_us(self) -> int:
        """How long until every denied limit would admit the request (0 if allowed)."""
        return max((r.retry_after_us for r in self.results if not r.allowed), default=0)

    @property
    def retry_after(self) -> float:
        return self.retry_after_us / 1_000_000


_ALLOWED = attrgetter("allowed")
