"""What the engine is asked: identities, limits and the checks that pair them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from enum import StrEnum
from functools import cached_property

from django_ratelimits.frozen import quick_init
from django_ratelimits.rates import Rate

# GCRA keeps interval * capacity in a Lua double: it must stay exact.
_MAX_TOLERANCE_US = 2**52
MAX_BURST = 1_000_000
MAX_BAN_AFTER = 100  # denials a ban may wait for: the check script keeps their times
MAX_BAN_SECONDS = 30 * 86_400  # the longest ban window, ban and ban cap
_KIND_RE = re.compile(r"[a-z][a-z0-9_]{0,15}")
# Kinds found valid, so that an identity of a kind seen before is not matched again
# (at most _KINDS_KEPT of them: code names kinds, clients do not).
_valid_kinds: set[str] = set()
_KINDS_KEPT = 64


class Algorithm(StrEnum):
    """The algorithms a limit can use. The value is what admin stores."""

    FIXED_WINDOW = "fixed_window"
    SLIDING_WINDOW = "sliding_window"
    SLIDING_WINDOW_COUNTER = "sliding_window_counter"
    SLIDING_LOG = "sliding_log"
    TOKEN_BUCKET = "token_bucket"
    GCRA = "gcra"
    CONCURRENCY = "concurrency"

    @property
    def code(self) -> str:
        """The short name used in Redis keys and by the Lua script."""
        return _CODES[self]

    @property
    def has_burst(self) -> bool:
        """Whether a burst (bucket capacity) other than the limit makes sense."""
        return self in _BURST_ALGORITHMS


_CODES = {
    Algorithm.FIXED_WINDOW: "fw",
    Algorithm.SLIDING_WINDOW: "sw",
    Algorithm.SLIDING_WINDOW_COUNTER: "swc",
    Algorithm.SLIDING_LOG: "log",
    Algorithm.TOKEN_BUCKET: "tb",
    Algorithm.GCRA: "gcra",
    Algorithm.CONCURRENCY: "cc",
}
_BURST_ALGORITHMS = frozenset({Algorithm.TOKEN_BUCKET, Algorithm.GCRA})
RATE_ALGORITHMS = tuple(a for a in Algorithm if a is not Algorithm.CONCURRENCY)
"""The algorithms that count requests over time (every one but concurrency)."""


def burst_problem(algorithm: str, rate: Rate, burst: int) -> str | None:
    """Why ``burst`` cannot be the capacity of ``rate`` under ``algorithm``, or None.

    The one statement of the burst rules: :class:`Limit` refuses what this
    names, and admin shows each answer translated next to the field. The
    answer is a code: ``"burst_unused"`` (the algorithm, or a string that names
    none, has no burst), ``"burst_range"`` (not a whole number from 1 to :data:`MAX_BURST`) or
    ``"burst_too_large"`` (GCRA's tolerance for ``rate`` would not stay exact).
    """
    if algorithm not in _BURST_ALGORITHMS:
        return "burst_unused"
    # A whole number: the spec carries it as written, and the check script reads digits
    # (a burst of 2.0 or True made every check of the limit fail, so fail open).
    if isinstance(burst, bool) or not isinstance(burst, int) or not 1 <= burst <= MAX_BURST:
        return "burst_range"
    if -(-rate.window_us // rate.limit) * burst > _MAX_TOLERANCE_US:
        return "burst_too_large"
    return None


def ban_problem(after: int, within: int, duration: int, maximum: int) -> str | None:
    """Why a ban after ``after`` denials ``within`` seconds, lasting ``duration``
    seconds doubled on each repeat up to ``maximum``, cannot be, or None.

    The one statement of the ban rules: :class:`Ban` refuses what this names,
    and admin shows each answer next to its field. The answer is a code:
    ``"ban_after"`` (not 1 to :data:`MAX_BAN_AFTER`), ``"ban_within"``,
    ``"ban_for"``, ``"ban_max"`` (not 1 s to :data:`MAX_BAN_SECONDS`), or
    ``"ban_max_short"`` (the cap is shorter than the first ban).
    """
    if not 1 <= after <= MAX_BAN_AFTER:
        return "ban_after"
    for code, seconds in (("ban_within", within), ("ban_for", duration), ("ban_max", maximum)):
        if not 1 <= seconds <= MAX_BAN_SECONDS:
            return code
    if maximum < duration:
        return "ban_max_short"
    return None


@dataclass(frozen=True)
class Ban:
    """An escalating ban (fail2ban's): ``after`` denials of one identity by the
    policy ``within`` seconds block it for ``duration`` seconds, doubled on each
    repeat up to ``maximum``. The repeat count (the level) is forgotten once
    ``maximum`` seconds pass after a ban's end with no new ban (see docs/bans.md).
    """

    after: int
    within: int
    duration: int
    maximum: int

    def __post_init__(self) -> None:
        problem = ban_problem(self.after, self.within, self.duration, self.maximum)
        if problem is not None:
            raise ValueError(
                f"{problem}: a ban after {self.after} denials within {self.within} s for "
                f"{self.duration} s up to {self.maximum} s (1 to {MAX_BAN_AFTER} denials, "
                f"1 s to {MAX_BAN_SECONDS} s, the cap at least the first ban)"
            )

    @cached_property
    def encoded(self) -> bytes:
        """The ban as the check script reads it after its limit's framed spec:
        ``!<after>|<within_us>|<duration_us>|<maximum_us>;``."""
        return b"!%d|%d|%d|%d;" % (
            self.after,
            self.within * 1_000_000,
            self.duration * 1_000_000,
            self.maximum * 1_000_000,
        )


@quick_init
@dataclass(frozen=True)
class Identity:
    """Who is counted: a kind (``ip``, ``user``, ``header``...) and a value.

    The value may be anything a client sent; the engine never puts it raw
    into a key (see :mod:`django_ratelimits.engine.keys`).
    """

    kind: str
    value: str

    def __post_init__(self) -> None:
        if self.kind in _valid_kinds:
            return
        if not _KIND_RE.fullmatch(self.kind):
            raise ValueError(
                f"identity kind {self.kind!r} must be 1-16 lowercase letters, digits or _"
            )
        if len(_valid_kinds) < _KINDS_KEPT:
            _valid_kinds.add(self.kind)


@dataclass(frozen=True)
class Limit:
    """One rate of one policy, with the algorithm that enforces it.

    ``burst`` is the bucket capacity for the token bucket and GCRA (default:
    the rate's limit); other algorithms have none. ``ban``, when given, is the
    policy's escalating ban (every limit of a policy carries the same one). A
    concurrency limit's rate is ``Rate(N, lease)``: at most N requests in flight
    at once, each slot held at most ``lease`` seconds (docs/concurrency.md); a
    request holds one slot whatever its cost.
    """

    policy: str
    rate: Rate
    algorithm: Algorithm = Algorithm.SLIDING_WINDOW
    burst: int | None = None
    ban: Ban | None = None

    def __post_init__(self) -> None:
        if not self.policy:
            raise ValueError("a limit needs a policy name")
        if self.burst is not None:
            problem = burst_problem(self.algorithm, self.rate, self.burst)
            if problem is not None:
                raise ValueError(
                    f"{problem}: a burst of {self.burst} for {self.algorithm} at {self.rate} "
                    f"(only the token bucket and GCRA have one, 1 to {MAX_BURST})"
                )

    def __hash__(self) -> int:
        # Limits key the caches of the request path (the RateLimit-Policy field, the
        # cache of denials): hashed once, not field by field on every lookup.
        return self._hash

    @cached_property
    def _hash(self) -> int:  # what dataclass's own __hash__ hashes: the compared fields
        return hash(tuple(getattr(self, f.name) for f in fields(self) if f.compare))

    @property
    def capacity(self) -> int:
        """What the limit holds: the bucket's burst, else the rate's limit."""
        return self.burst if self.burst is not None else self.rate.limit

    @cached_property
    def most_cost(self) -> int:
        """The most one request may be charged: the capacity, or under the token bucket
        and GCRA the rate's limit where that is more than the burst. Such a request
        passes only when the bucket is full and leaves it in debt, so it is charged a
        whole window's budget, never the burst alone (docs/cost.md)."""
        if self.algorithm in _BURST_ALGORITHMS:
            return max(self.capacity, self.rate.limit)
        return self.capacity

    @cached_property
    def spec(self) -> str:
        """The limit as the check script reads it, and its field in an
        identity's state HASH: ``<algorithm>|<limit>|<window_us>|<capacity>|<policy>``."""
        rate = self.rate
        return f"{self.algorithm.code}|{rate.limit}|{rate.window_us}|{self.capacity}|{self.policy}"

    @cached_property
    def encoded_spec(self) -> bytes:
        """:attr:`spec` as sent to Redis, encoded once."""
        return self.spec.encode()

    @cached_property
    def framed_spec(self) -> bytes:
        """:attr:`encoded_spec` after its length and ``:``, then the ban's
        :attr:`Ban.encoded` if any, as the check script reads a group's limits
        (one argument, the limits' framed specs one after the other)."""
        framed = b"%d:%s" % (len(self.encoded_spec), self.encoded_spec)
        return framed if self.ban is None else framed + self.ban.encoded

    def framed_at(self, cost: int) -> bytes:
        """:attr:`framed_spec` for this limit charging ``cost`` instead of the call's cost:
        ``<length>*<cost>:<spec>``, then the ban's :attr:`Ban.encoded` if any."""
        framed = b"%d*%d:%s" % (len(self.encoded_spec), cost, self.encoded_spec)
        return framed if self.ban is None else framed + self.ban.encoded

    @cached_property
    def is_log(self) -> bool:
        """Whether the state is a key of its own (the sliding log's or the
        concurrency limit's ZSET) rather than a field of the state HASH."""
        return self.algorithm is Algorithm.SLIDING_LOG or self.is_concurrency

    @cached_property
    def is_concurrency(self) -> bool:
        """Whether the limit counts requests in flight (slots held until released)."""
        return self.algorithm is Algorithm.CONCURRENCY


@quick_init
@dataclass(frozen=True)
class Gate:
    """A budget of client-chosen identities per client address.

    At most ``budget.limit`` distinct identities of one kind pass the gate of
    ``client`` (an ``ip`` identity) in any ``budget.period``: an identity passes
    if it was seen through the gate within the period, or if there is room for
    one more. A check whose identity does not pass counts against ``client``
    instead, under the same limits, and writes nothing for its own identity.
    """

    client: Identity
    budget: Rate


@quick_init
@dataclass(frozen=True)
class Check:
    """The limits to apply to one identity, decided all or nothing.

    ``metadata`` (the head of a hit entry, see :mod:`.hits`), when given, is
    appended to the identity's capped metadata list together with the time, the
    outcome and the policies that counted the request, if one of them denied it,
    or on every hit with ``record_every``. The checks of one call that name the
    same identity make one entry: one request is one hit.
    ``shadow`` checks are of shadow-mode policies: what they would have denied
    goes to the identity's shadow record, never its offender record.
    ``gate``, when given, is the identity budget the identity must pass first
    (see :class:`Gate`). With ``overrides=False`` a block or allow-listing by
    staff does not decide the check, its limits do (the way back to admin, see
    :mod:`django_ratelimits.way_back`). ``costs``, when given, are what each of
    ``limits`` charges instead of the call's cost (a policy's cost per request);
    a check is still all or nothing.
    A ``soft`` check is one whose denial refuses nothing (a view's
    ``@ratelimit(block=False)``): decided apart, so that its denial never stops the
    other limits from counting a request that goes on, and charged only if the
    request's checks that are neither soft nor shadow all pass (soft limits count the
    requests that go on; on a cluster, where those checks span several calls, the soft
    ones follow in a round of their own).
    A ``reserve`` check is a failed-login policy's (:mod:`django_ratelimits.logins`): a
    peek passes only if the request fits beside the identity's logins in flight, and
    reserves its place until a check with the same request id (``token``) charges its
    failure, or :meth:`Engine.release <django_ratelimits.engine.core.Engine.release>`
    gives the place back, or a minute passes (``lua/attempts.lua``).
    """

    identity: Identity
    limits: Sequence[Limit] = field(default_factory=tuple)
    metadata: str | None = None
    gate: Gate | None = None
    shadow: bool = False
    record_every: bool = False
    overrides: bool = True
    costs: tuple[int, ...] = ()
    soft: bool = False
    reserve: bool = False

    def charges(self, cost: int) -> tuple[int, ...]:
        """What each of ``limits`` charges in a call of ``cost``: its own cost, when
        ``costs`` gives one, else the call's."""
        return self.costs or (cost,) * len(self.limits)
