"""A policy as the request path uses it: compiled, immutable, no database, no labels.

:class:`PolicySpec` is what a ``Policy`` row compiles to, what a decorator's
defaults declare, and what the middleware, the decorators, DRF and the compat
layer all enforce through the engine. :class:`Mode` and :class:`KeyKind` are
the values admin stores; what admin calls them is in
:mod:`django_ratelimits.policies.labels`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final, Literal

from django_ratelimits.conf import IPNetwork
from django_ratelimits.engine import Algorithm, Ban, Limit
from django_ratelimits.policies.matching import PathPattern
from django_ratelimits.policies.tiers import Tier
from django_ratelimits.rates import Rate

__all__ = [
    "LOGIN_KEYS",
    "MAX_COST",
    "Counts",
    "KeyKind",
    "Mode",
    "PolicySpec",
    "Recording",
    "cost_problem",
    "covers_method",
]


class Mode(StrEnum):
    """Whether a policy blocks. The value is what admin stores."""

    ENFORCE = "enforce"
    SHADOW = "shadow"


class Counts(StrEnum):
    """What a policy counts. The value is what admin stores.

    A failed-login policy is charged by Django's ``user_login_failed`` signal
    and checked, without charge, before a login's credentials are
    (:mod:`django_ratelimits.logins`); the middleware never counts it.
    """

    REQUESTS = "requests"
    FAILED_LOGINS = "failed_logins"


class Recording(StrEnum):
    """Which hits a policy records in the identity's metadata list (who was behind
    each request, and what it asked), for the offender dashboard. The value is
    what admin stores; members compare in the order of how much they record."""

    NONE = "none"
    DENIALS = "denials"  # the requests it denied, or would have denied in shadow mode
    EVERY = "every"  # every request it counted

    @property
    def rank(self) -> int:
        return _RECORDING_RANK[self]


_RECORDING_RANK = {Recording.NONE: 0, Recording.DENIALS: 1, Recording.EVERY: 2}


class KeyKind(StrEnum):
    """What a policy counts by. The value is what admin stores."""

    IP = "ip"
    USER = "user"
    USER_OR_IP = "user_or_ip"
    IP_AND_USER = "ip_and_user"
    HEADER = "header"
    CALLABLE = "callable"
    # Failed-login policies only: the username tried (normalised), the client IP
    # and it as two identities, or the pair as one identity.
    USERNAME = "username"
    IP_AND_USERNAME = "ip_and_username"
    IP_USERNAME_PAIR = "ip_username"

    @property
    def identity_kinds(self) -> frozenset[str]:
        """The kinds of :class:`~django_ratelimits.engine.Identity` this key counts
        (what :func:`django_ratelimits.identity.identities` yields for it)."""
        return _IDENTITY_KINDS[self]


_IDENTITY_KINDS = {
    KeyKind.IP: frozenset({"ip"}),
    KeyKind.USER: frozenset({"user"}),
    KeyKind.USER_OR_IP: frozenset({"user", "ip"}),
    KeyKind.IP_AND_USER: frozenset({"ip", "user"}),
    KeyKind.HEADER: frozenset({"header", "ip"}),  # the IP when the header is missing
    KeyKind.CALLABLE: frozenset({"key"}),
    KeyKind.USERNAME: frozenset({"username"}),
    KeyKind.IP_AND_USERNAME: frozenset({"ip", "username"}),
    KeyKind.IP_USERNAME_PAIR: frozenset({"ip_username"}),
}

IDENTITY_KINDS: Final = ("ip", "user", "header", "key", "username", "ip_username")
"""Every kind of identity a policy counts (the kinds of every :class:`KeyKind`), in the
order staff see them."""


def gated(kind: str) -> bool:
    """Whether a client IP's identity budget gates identities of ``kind``: every kind a
    client chooses itself, so every kind but the IP (decide.py)."""
    return kind != "ip"


GATED_KINDS: Final = (*filter(gated, IDENTITY_KINDS), "get", "post")
"""The kinds of identity a client IP's identity budgets may hold (with the compat
layer's ``get:`` and ``post:`` keys): forgetting the IP erases its budget of each
(engine/erasure.py)."""

LOGIN_KEYS = frozenset({KeyKind.IP, *(k for k in KeyKind if "username" in k.value)})
"""The keys a failed-login policy may count by (and the only ones that use a username)."""


MAX_COST: Final = 1_000_000
"""The most one request may cost under a policy (its ``cost`` field, or a cost function's
answer, which is lowered to it)."""


def cost_problem(cost: object, limits: Iterable[Limit]) -> str | None:
    """Why ``cost`` cannot be a policy's cost with ``limits``: ``"cost_range"`` (not a
    whole number from 1 to :data:`MAX_COST`), ``"cost_capacity"`` (more than a limit's
    window allows: such a request could never pass; a bucket takes up to its rate's
    limit, in debt past its burst), or None."""
    if isinstance(cost, bool) or not isinstance(cost, int) or not 1 <= cost <= MAX_COST:
        return "cost_range"
    if any(cost > limit.most_cost for limit in limits):
        return "cost_capacity"
    return None


@dataclass(frozen=True)
class PolicySpec:
    """One enabled policy, ready to enforce.

    ``path`` is a regular expression in RE2's syntax (one RE2 refuses raises
    :class:`~django_ratelimits.policies.matching.PatternError`), searched in
    ``request.path_info`` (the path below any ``SCRIPT_NAME`` prefix the site is
    mounted under) by the middleware; empty means the policy applies only where
    a decorator (or DRF throttle) names it. ``methods`` are upper-case; empty means every method.
    ``key_arg`` is the header name for :attr:`KeyKind.HEADER` and the dotted
    path of a ``callable(request) -> str | None`` for :attr:`KeyKind.CALLABLE`.
    Higher ``priority`` is evaluated (and reported in headers) first. A
    :attr:`~Algorithm.CONCURRENCY` policy has one rate, ``Rate(slots, lease)``:
    at most ``slots`` requests in flight at once, each held at most ``lease`` seconds.
    ``identity_budget`` bounds the client-chosen identities (header values,
    callable keys, users) one client IP brings to the policy: a rate, ``"off"``,
    or ``"default"`` for ``DJANGO_RATELIMITS["IDENTITY_BUDGET"]``.
    ``record_metadata`` says which hits are recorded for the dashboard
    (:class:`Recording`): by default the denials, so that "who was behind the
    denials" is answered without recording every allowed request.
    ``counts`` says whether every request counts or only failed logins
    (:class:`Counts`); ``reset_on_success`` (failed logins only) clears the
    policy's counters of a login's identities when it succeeds.
    ``cost`` is what one request charges each of its limits (1 to :data:`MAX_COST`);
    a cost function named by ``@ratelimit(..., cost=...)`` may say otherwise per
    request (:mod:`django_ratelimits.costs`).
    ``ban``, when given, blocks an identity the policy denies too often
    (:class:`~django_ratelimits.engine.Ban`, see docs/bans.md); a shadow-mode
    policy never bans.
    ``tiers`` give other rates to some users (the first that matches, see
    :mod:`django_ratelimits.policies.tiers`); ``tier_limits`` are their limits,
    in the same order. A tier's rates (like an identity override's, see
    :meth:`limits_of`) use the policy's algorithm, and each rate's limit as
    the bucket capacity: ``burst`` is for the policy's own rates.
    """

    name: str
    rates: tuple[Rate, ...]
    algorithm: Algorithm = Algorithm.SLIDING_WINDOW
    burst: int | None = None
    mode: Mode = Mode.ENFORCE
    key: KeyKind = KeyKind.IP
    key_arg: str = ""
    path: str = ""
    methods: frozenset[str] = frozenset()
    exempt_staff: bool = False
    exempt_superusers: bool = False
    allow_cidrs: tuple[IPNetwork, ...] = ()
    fail_closed: bool = False
    record_metadata: Recording = Recording.DENIALS
    priority: int = 0
    description: str = ""
    identity_budget: Rate | Literal["default", "off"] = "default"
    counts: Counts = Counts.REQUESTS
    reset_on_success: bool = False
    cost: int = 1
    ban: Ban | None = None
    tiers: tuple[Tier, ...] = ()
    limits: tuple[Limit, ...] = field(init=False, repr=False, compare=False)
    path_re: PathPattern | None = field(init=False, repr=False, compare=False)
    tier_limits: tuple[tuple[Limit, ...], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.rates:
            raise ValueError(f"policy {self.name!r} needs at least one rate")
        if self.algorithm is Algorithm.CONCURRENCY and len(self.rates) != 1:
            raise ValueError(
                f"concurrency policy {self.name!r} takes one rate: Rate(slots, lease seconds)"
            )
        if cost_problem(self.cost, ()) is not None:
            raise ValueError(
                f"policy {self.name!r}: the cost must be a whole number from 1 to {MAX_COST}, "
                f"not {self.cost!r}"
            )
        object.__setattr__(self, "limits", self.limits_of(self.rates, self.burst))
        object.__setattr__(self, "path_re", PathPattern(self.path) if self.path else None)
        tier_limits = tuple(self.limits_of(tier.rates) for tier in self.tiers)
        object.__setattr__(self, "tier_limits", tier_limits)

    def limits_of(self, rates: tuple[Rate, ...], burst: int | None = None) -> tuple[Limit, ...]:
        """The limits of ``rates`` under this policy, with its ban (a shadow-mode policy
        never bans): its own (with its ``burst``), a tier's or an override's."""
        ban = None if self.shadow else self.ban
        return tuple(Limit(self.name, rate, self.algorithm, burst, ban) for rate in rates)

    @property
    def failed_logins(self) -> bool:
        return self.counts == Counts.FAILED_LOGINS

    @property
    def shadow(self) -> bool:
        return self.mode == Mode.SHADOW

    def applies_to_method(self, method: str) -> bool:
        return not self.methods or covers_method(self.methods, method)

    def counts_request(self, method: str) -> bool:
        """Whether a view or path applying this policy counts a ``method`` request: its
        methods cover it, and it is not a failed-login policy (those count only through
        :mod:`django_ratelimits.logins`)."""
        return not self.failed_logins and self.applies_to_method(method)


KNOWN_METHODS: Final = frozenset(
    {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"}
)
"""The methods HTTP defines (RFC 9110, and PATCH): a limit on some of them counts any other."""

WRITE_METHODS: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})
"""The methods that send a change: a GET limit counts every method but these."""


def covers_method(methods: Collection[str], method: str) -> bool:
    """Whether a limit on ``methods`` (upper-case names) counts a ``method`` request.

    A function view runs its GET code for any method it does not check for, so a GET
    limit counts every method but the writes (:data:`WRITE_METHODS`): HEAD (Django
    answers it with the GET code), OPTIONS, TRACE and CONNECT. A method HTTP does not
    define (``FOO``, ``PROPFIND``) counts under every limit.
    """
    method = method.upper()
    return (
        method in methods
        or method not in KNOWN_METHODS
        or ("GET" in methods and method not in WRITE_METHODS)
    )
