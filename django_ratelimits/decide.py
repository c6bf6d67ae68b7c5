"""Decide these policies for this request: one engine call, one verdict.

The middleware, ``@ratelimit``, the DRF throttle and the compat layer all sit
on this module:

* :func:`decide` / :func:`adecide`: policies -> :class:`Verdict`, in one engine call;
* :func:`decide_policy` / :func:`adecide_policy`: the request's verdict once the
  policy named by code is decided too (unless the middleware already did);
* :class:`Verdict`: what was decided, stored on ``request.ratelimit``;
* :class:`RateLimited`: raised by a view to answer 429.

One request's steps are :class:`Planned`'s: plan the checks (exemptions,
identities, identity budgets), ask the engine unless the circuit breaker is
open, then record success or failure and send the signals. The limits of
every policy that counts by the same identity form one all-or-nothing check,
shadow-mode policies their own check (so a shadow denial never stops an
enforced limit from counting, and the other way round; what it would have
denied is recorded apart from denials), and so does each ``soft`` policy (a
view's ``@ratelimit(block=False)``, whose denial refuses nothing: it never stops
the other limits from counting a request that goes on, and counts only a request
the other policies let through). An identity's checks share one hit
entry per request, recorded as its policies' ``record_metadata`` asks (by
default only when a policy denied, or would have denied, it). A client-chosen
identity (header, callable, user) is gated by its policy's identity budget
for the client IP: past it, the check counts against the IP (see
``docs/client-ip.md``). With ``METRICS`` on, the observer of
:mod:`django_ratelimits.metrics` hears of each engine call and each verdict.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Final

from asgiref.sync import sync_to_async
from django.dispatch import Signal
from django.http import HttpRequest

from django_ratelimits import metrics, signals
from django_ratelimits.breaker import breaker
from django_ratelimits.conf import get_settings
from django_ratelimits.costs import charges, cost_of, has_function
from django_ratelimits.deny_cache import DenialCache, Sending, cache_for
from django_ratelimits.effective import limits_for, prepare
from django_ratelimits.engine import (
    Check,
    Decision,
    Gate,
    Identity,
    Limit,
    LimitResult,
    get_engine,
)
from django_ratelimits.engine.errors import BackendError
from django_ratelimits.engine.hits import entry_head, ip_behind, user_behind
from django_ratelimits.engine.keys import label
from django_ratelimits.errors import RateLimitsError
from django_ratelimits.frozen import quick_init
from django_ratelimits.identity import client_address, client_ip, identities, ip_identity
from django_ratelimits.policies.registry import PolicyRegistry, acurrent, current, get_registry
from django_ratelimits.policies.spec import KeyKind, PolicySpec, Recording, gated
from django_ratelimits.rates import Rate
from django_ratelimits.way_back import away_back, way_back

__all__ = [
    "Planned",
    "RateLimited",
    "Verdict",
    "adecide",
    "adecide_policy",
    "aprepare",
    "decide",
    "decide_policy",
]

logger = logging.getLogger("django_ratelimits")


@quick_init
@dataclass(frozen=True)
class Verdict:
    """What the limiter decided for one request (``request.ratelimit``).

    ``policies`` are the policies that applied (exempt ones left out);
    ``decision`` is the engine's answer, ``None`` when nothing needed checking
    or Redis failed (then ``error`` says why). ``effective`` holds, by policy
    name, the limits that were checked when they were not the policy's own (an
    identity override or a tier, see :mod:`django_ratelimits.effective`).
    ``unanswered`` names the policies whose engine call failed (``error`` says why):
    a request decided in two steps (the middleware, then a DRF throttle) may have one
    step answered and the other not, and only the policies of the failed one fail
    closed.
    """

    policies: tuple[PolicySpec, ...]
    decision: Decision | None = None
    error: BackendError | None = None
    considered: frozenset[str] = frozenset()
    effective: tuple[tuple[str, tuple[Limit, ...]], ...] = ()
    # Whether the worker's cache of denials answered: no engine call was made.
    cached: bool = False
    unanswered: frozenset[str] = frozenset()

    def covers(self, name: str) -> bool:
        """Whether the policy ``name`` was already decided (or found exempt) here."""
        return name in self.considered

    def merge(self, other: Verdict) -> Verdict:
        """Both verdicts as one, for a request checked in two steps."""
        decision = self.decision
        if decision is None or other.decision is None:
            decision = decision or other.decision
        else:
            decision = Decision(
                decision.results + other.decision.results,
                max(decision.now_us, other.decision.now_us),
                decision.held + other.decision.held,
            )
        return Verdict(
            self.policies + other.policies,
            decision,
            self.error or other.error,
            self.considered | other.considered,
            self.effective + other.effective,
            self.cached and other.cached,
            self.unanswered | other.unanswered,
        )

    def limits_of(self, policy: PolicySpec) -> tuple[Limit, ...]:
        """The limits ``policy`` was checked against for this request."""
        if not self.effective:  # every policy was checked under its own limits
            return policy.limits
        return next((lim for name, lim in self.effective if name == policy.name), policy.limits)

    def policy(self, name: str) -> PolicySpec:
        """The applied policy named ``name`` (a result's ``limit.policy``)."""
        return self._by_name[name]

    @cached_property
    def _by_name(self) -> dict[str, PolicySpec]:
        return {p.name: p for p in self.policies}

    @property
    def results(self) -> tuple[LimitResult, ...]:
        return self.decision.results if self.decision else ()

    def blocking(self, names: Iterable[str] | None = None) -> tuple[LimitResult, ...]:
        """Denials of enforced policies (of ``names`` only, when given)."""
        wanted = None if names is None else set(names)
        return tuple(
            r
            for r in self.results
            if not r.allowed
            and not self._by_name[r.limit.policy].shadow
            and (wanted is None or r.limit.policy in wanted)
        )

    def failed_closed(self, names: Iterable[str] | None = None) -> bool:
        """Redis failed to decide an enforced fail-closed policy (of ``names``)."""
        wanted = None if names is None else set(names)
        unanswered = self.unanswered
        return bool(unanswered) and any(
            p.fail_closed
            and not p.shadow
            and p.name in unanswered
            and (wanted is None or p.name in wanted)
            for p in self.policies
        )

    def blocked(self, names: Iterable[str] | None = None) -> bool:
        """Whether the request must be refused (for the policies ``names``)."""
        decision = self.decision
        if not self.unanswered and (decision is None or decision.allowed):
            return False  # nothing denied, nothing failed: whatever ``names`` are
        names = None if names is None else set(names)
        return bool(self.blocking(names)) or self.failed_closed(names)

    def retry_after(self, names: Iterable[str] | None = None) -> int:
        """Whole seconds to send in ``Retry-After`` for the denials (of ``names``):
        never earlier than the real time. Without a decision (Redis failed), or when
        one of them failed closed (Redis failed to decide it), the breaker's cooldown
        at least."""
        cooldown = math.ceil(get_settings().breaker_cooldown)
        if self.decision is None:
            return cooldown
        waits = [r.retry_after_us for r in self.blocking(names)]
        wait = max(1, math.ceil(max(waits, default=0) / 1_000_000))
        return max(wait, cooldown) if self.failed_closed(names) else wait

    def headline(self) -> LimitResult | None:
        """The enforced result to report in ``RateLimit``: the longest denial,
        else the one with the least quota left."""
        best, least = None, None
        by_name = self._by_name
        for r in self.results:  # min() by this key, without a lambda call per result
            if not by_name[r.limit.policy].shadow:
                key = (r.allowed, -r.retry_after_us, r.remaining)
                if least is None or key < least:
                    best, least = r, key
        return best


class RateLimited(RateLimitsError):
    """Raise it from a view to answer 429 Too Many Requests.

    The middleware turns it into the same response a denied policy gets.
    ``verdict`` carries the limiter's decision when there is one;
    ``retry_after`` (seconds) is used when there is none.
    """

    def __init__(self, verdict: Verdict | None = None, *, retry_after: int | None = None) -> None:
        self.verdict = verdict
        self.retry_after = retry_after
        super().__init__("rate limit exceeded")


def decide(
    request: HttpRequest, policies: Iterable[PolicySpec], soft: frozenset[str] = frozenset()
) -> Verdict:
    """Decide ``policies`` for ``request`` in one engine call; a denial by those named
    in ``soft`` refuses nothing (the caller lets the request go on)."""
    # The engine is got inside the call: making its client can fail like a check.
    return Planned(request, tuple(policies), soft=soft).run(
        lambda checks: get_engine().check(checks)
    )


async def adecide(
    request: HttpRequest, policies: Iterable[PolicySpec], soft: frozenset[str] = frozenset()
) -> Verdict:
    """:func:`decide` for async code: never blocks the event loop."""
    policies = tuple(policies)
    await aprepare(request, policies)
    return await Planned(request, policies, soft=soft).arun(
        lambda checks: get_engine().acheck(checks)
    )


async def aprepare(request: HttpRequest, policies: tuple[PolicySpec, ...]) -> None:
    """Read off the event loop what planning ``policies`` for ``request`` would read from
    the database on it: the lazy user (exemptions, per-user keys), the user's tier, and
    whether staff may lift blocks. Call it before :class:`Planned` in async code."""
    if policies and hasattr(request, "auser") and get_settings().enabled:
        if any(_reads_user(p) for p in policies):
            request.user = await request.auser()
        user = getattr(request, "user", None)
        if any(p.tiers for p in policies) and user is not None and user.is_authenticated:
            await sync_to_async(prepare)(request, policies)  # no tier reads for no one
        await away_back(request)


def decide_policy(
    request: HttpRequest, name: str, *, chain: Sequence[str] = (), soft: Iterable[str] = ()
) -> Verdict:
    """The request's verdict (``request.ratelimit``) once the policy ``name`` is decided too.

    ``chain`` names the other policies of the view's decorators (those it wraps), and
    ``soft`` those applied with ``block=False``: the first decorator a request reaches
    decides them all in one call, all or nothing per identity, as the middleware does,
    so that a policy an inner decorator refuses costs the outer ones nothing. Unchanged
    when the middleware decided them already, or for a policy disabled, unknown
    (logged) or not for this method.
    """
    verdict, specs = _undecided(current(), request, (name, *chain))
    if not specs:
        return verdict
    return _store(request, verdict, decide(request, specs, frozenset(soft)))


async def adecide_policy(
    request: HttpRequest, name: str, *, chain: Sequence[str] = (), soft: Iterable[str] = ()
) -> Verdict:
    """:func:`decide_policy` for async code."""
    verdict, specs = _undecided(await acurrent(), request, (name, *chain))
    if not specs:
        return verdict
    return _store(request, verdict, await adecide(request, specs, frozenset(soft)))


def _undecided(
    registry: PolicyRegistry, request: HttpRequest, names: Sequence[str]
) -> tuple[Verdict, list[PolicySpec]]:
    """The request's verdict so far, and those of the policies ``names`` still to decide."""
    verdict: Verdict = getattr(request, "ratelimit", None) or Verdict(())
    method = request.method or "GET"
    specs: list[PolicySpec] = []
    for name in dict.fromkeys(names):  # in order, each once
        if verdict.covers(name):
            continue
        spec = registry.get(name)
        if spec is None:
            if not registry.knows(name):
                _report_unknown(name)
        elif spec.counts_request(method):
            specs.append(spec)
    return verdict, specs


def _store(request: HttpRequest, before: Verdict, new: Verdict) -> Verdict:
    """Merge ``new`` into the request's verdict, which ``request.ratelimit`` then holds."""
    request.ratelimit = merged = before.merge(new)  # type: ignore[attr-defined]
    return merged


_UNKNOWN_NAMES_MAX: Final = 1024
_reported: dict[str, float] = {}


def _report_unknown(name: str) -> None:
    """Log that code names a policy that does not exist (nothing is limited), at most
    once per name per ``POLICY_REFRESH`` interval, so a flood of requests logs one line."""
    now = time.monotonic()
    last = _reported.get(name)
    if last is not None and now - last < get_settings().policy_refresh:
        return
    if len(_reported) >= _UNKNOWN_NAMES_MAX:
        _reported.clear()
    _reported[name] = now
    logger.error(
        "no rate-limit policy is named %r: the code that names it limits nothing. "
        "Create it in admin or give the decorator a rate= default (check E006 lists them all).",
        name,
    )


class Planned:
    """One request's policies, planned into engine checks: every step but the engine call.

    ``verdict`` is already set when no call is needed (nothing to check, or the
    circuit breaker is open); otherwise :meth:`run` (or :meth:`arun`) sends
    ``checks`` to the engine and turns its answer, or its failure, into the
    verdict. ``checks`` are planned from ``policies`` unless given (the compat
    API counts its own identities). ``behind`` is who the hit entries of the
    client IP name (a login's username tried); by default the user. Unless
    ``observed`` is false (a look that charges nothing, or a second step of a request
    counted already), the metrics observer hears of the call and the verdict; it hears
    of the breaker's state in any case. The policies named in ``soft`` refuse nothing when
    they deny (a view's ``@ratelimit(block=False)``): each is checked apart. ``looks``:
    a call that refuses nothing (a compat peek, or a failed login's charge, whose look
    already refused or let the login through), whose denials send no ``rate_limited``
    (whether Redis or the cache of denials answers it). ``refuses``: whether the package
    refuses the request when the call denies it; false for a compat charge whose caller
    decides (``is_ratelimited`` and ``get_usage`` with ``increment=True``, the compat
    ``@ratelimit(block=False)``), which is planned, signalled and counted as any other,
    but whose block is logged as let through.

    Its signals are sent by :meth:`run` with ``Signal.send``, and by :meth:`arun` with
    ``Signal.asend`` once the verdict is made: on the event loop, ``send`` cannot run
    a project's async receiver (Django runs it with ``async_to_sync``).
    """

    def __init__(
        self,
        request: HttpRequest,
        policies: tuple[PolicySpec, ...],
        checks: list[Check] | None = None,
        *,
        behind: str | None = None,
        observed: bool = True,
        soft: frozenset[str] = frozenset(),
        looks: bool = False,
        refuses: bool = True,
    ) -> None:
        self.request = request
        self.looks = looks
        self.refuses = refuses
        # Whether the call run is a peek (``run(charge=False)``): of a call that refuses
        # nothing, a peek's block is logged as a look, a charge's not at all.
        self._peeking = False
        self.considered = _names(policies)
        # By policy, the limits checked where they are not its own (a tier, an override).
        self.effective: tuple[tuple[str, tuple[Limit, ...]], ...] = ()
        if checks is None:
            self.applied, self.checks, self.effective = _plan(request, policies, behind, soft)
        else:
            self.applied, self.checks = policies, checks
        self.verdict: Verdict | None = None
        self.observer = metrics.observer() if observed else None
        # The signals kept until run or arun sends them (None: send at once, see _signal).
        self._unsent: list[tuple[Signal, dict[str, object]]] | None = []
        if not self.checks:
            self.verdict = Verdict(self.applied, considered=self.considered)
        elif not breaker.may_try():
            self.verdict = self._refused(BackendError("circuit breaker open"))

    def run(
        self,
        call: Callable[[list[Check]], Decision],
        *,
        charge: bool = True,
        counted: bool | None = None,
        cached: bool = True,
    ) -> Verdict:
        """The verdict, with ``call`` (an engine's ``check``, or ``peek`` with
        ``charge=False``) if one is needed and the cache of denials does not answer.
        A refusal the cache makes is counted for the offender records if ``counted``
        (by default, if ``charge``: a peek that refuses a request, as a login's look
        before the password, is counted; one that only asks is not). With
        ``cached=False`` the cache is not asked: the charge of what already happened
        (a failed login, which its look let through) is Redis' to count."""
        kept, self._unsent = self._unsent or [], None  # the rest is sent at once
        self._peeking = not charge
        for signal, named in kept:
            signal.send(sender=PolicySpec, request=self.request, **named)
        if self.verdict is not None:
            return self.verdict
        # The trial of a half-open breaker is taken before the cache of denials may read
        # Redis: one request tries a Redis that may hang, not every request at once.
        trial = breaker.allow()
        if trial is None:  # open, or another request took the trial
            return self._refused(BackendError("circuit breaker open"))
        try:
            cache = _cache() if cached else None
            if cache is None:
                return self._call(call)
            if cache.epoch_due():
                cache.read_epoch()
            verdict = self._cached(cache, charge, counted)
            if verdict is None:
                verdict = self._call(call, cache)
            else:
                breaker.abandon(trial)  # Redis was not asked
            if cache.flush_due():
                cache.flush()
            return verdict
        except BaseException:
            breaker.abandon(trial)  # an exception of the request's own (a cancelled task)
            raise

    async def arun(
        self,
        call: Callable[[list[Check]], Awaitable[Decision]],
        *,
        charge: bool = True,
        counted: bool | None = None,
        cached: bool = True,
    ) -> Verdict:
        """:meth:`run` with an async ``call`` (``acheck`` or ``apeek``); the signals are
        sent with ``asend`` once the verdict is made."""
        verdict = await self._arun(call, charge, counted, cached)
        kept, self._unsent = self._unsent or [], []
        if kept:
            await _handing_over(verdict, self._asend(kept))
        return verdict

    async def _asend(self, kept: list[tuple[Signal, dict[str, object]]]) -> None:
        for signal, named in kept:
            await signal.asend(sender=PolicySpec, request=self.request, **named)

    async def _arun(
        self,
        call: Callable[[list[Check]], Awaitable[Decision]],
        charge: bool,
        counted: bool | None,
        cached: bool,
    ) -> Verdict:
        if self.verdict is not None:
            return self.verdict
        self._peeking = not charge
        trial = breaker.allow()
        if trial is None:
            return self._refused(BackendError("circuit breaker open"))
        try:
            cache = _cache() if cached else None
            if cache is None:
                return await self._acall(call)
            if cache.epoch_due():
                await cache.aread_epoch()
            verdict = self._cached(cache, charge, counted)
            if verdict is None:
                verdict = await self._acall(call, cache)
            else:
                breaker.abandon(trial)
            if cache.flush_due():
                await _handing_over(verdict, cache.aflush())
            return verdict
        except BaseException:
            breaker.abandon(trial)
            raise

    def _call(
        self, call: Callable[[list[Check]], Decision], cache: DenialCache | None = None
    ) -> Verdict:
        sent = None if cache is None else cache.sending(self.checks)
        try:
            decision = self._ask(call)
        except BackendError as error:
            return self.failed(error, cache)
        return self._received(decision, cache, sent)

    async def _acall(
        self, call: Callable[[list[Check]], Awaitable[Decision]], cache: DenialCache | None = None
    ) -> Verdict:
        sent = None if cache is None else cache.sending(self.checks)
        try:
            decision = await self._aask(call)
        except BackendError as error:
            return self.failed(error, cache)
        return self._received(decision, cache, sent)

    def _received(
        self, decision: Decision, cache: DenialCache | None, sent: Sending | None
    ) -> Verdict:
        verdict = self.decided(decision)
        if cache is not None and sent is not None and not decision.allowed:
            enforced = frozenset(p.name for p in self.applied if not p.shadow)
            cache.learn(decision, enforced, sent)
        return verdict

    def _ask(self, call: Callable[[list[Check]], Decision]) -> Decision:
        """``call`` on the checks, timed for the observer if there is one."""
        observer = self.observer
        if observer is None:
            return call(self.checks)
        started = time.perf_counter()
        try:
            return call(self.checks)
        finally:
            observer.engine_call(time.perf_counter() - started)

    async def _aask(self, call: Callable[[list[Check]], Awaitable[Decision]]) -> Decision:
        """:meth:`_ask` with an async ``call``."""
        observer = self.observer
        if observer is None:
            return await call(self.checks)
        started = time.perf_counter()
        try:
            return await call(self.checks)
        finally:
            observer.engine_call(time.perf_counter() - started)

    def _cached(self, cache: DenialCache, charge: bool, counted: bool | None) -> Verdict | None:
        """The verdict the cache of denials gives without Redis, if it has one."""
        count = charge if counted is None else counted
        decision = cache.refuse(self.checks, count=count, look=not charge)
        return None if decision is None else self._announced(decision, cached=True)

    def decided(self, decision: Decision) -> Verdict:
        breaker.success()
        _breaker_heard(self.observer)
        return self._announced(decision)

    def _announced(self, decision: Decision, *, cached: bool = False) -> Verdict:
        """The verdict of ``decision`` (the denial cache's if ``cached``), its blocks
        logged, its denials signalled, its outcomes counted."""
        verdict = Verdict(
            self.applied,
            decision,
            considered=self.considered,
            effective=self.effective,
            cached=cached,
        )
        if self.observer is not None:
            metrics.record_decision(
                self.observer, self.applied, decision, cached=cached, soft=self._soft(cached)
            )
        if decision.allowed:  # nothing denied (a block denies): nothing to log or signal
            return verdict
        announced: set[str] = set()
        # A blocked identity's first result, and whether a policy that refuses found it
        # (a shadow check of a blocked identity is denied too, but refuses nothing, and
        # so does a soft one: the view decides).
        blocked: dict[Identity, tuple[LimitResult, bool]] = {}
        soft = self._soft_names()
        for result in decision.results:
            policy = verdict._by_name[result.limit.policy]
            if result.blocked and not policy.shadow:
                first, refused = blocked.get(result.identity, (result, False))
                blocked[result.identity] = first, refused or policy.name not in soft
            if not (result.allowed or self.looks) and policy.name not in announced:
                announced.add(policy.name)
                self._signal(
                    signals.rate_limited,
                    policy=policy,
                    result=result,
                    shadow=policy.shadow,
                )
        for result, refused in blocked.values():
            self._log_block(result, refused)
        return verdict

    def _log_block(self, result: LimitResult, refused: bool) -> None:
        """The line of a block ``result`` found: a refusal's (``refused``: a policy that
        refuses found it, on a call that refuses), or a look's when the call or the
        policies refuse nothing (a compat peek, a compat charge whose caller decides, a
        view's ``block=False``: the view decides what to do with the answer). The charge
        of a failed login refuses nothing and looks at nothing: no line (its look let the
        login through; the next look logs the refusal)."""
        if not self.looks:
            if not self.refuses:
                _write_block_line(self.request, result, "let through", _COUNT_REFUSES_NOTHING)
            elif refused:
                _write_block_line(self.request, result, "refused")
            else:
                _write_block_line(self.request, result, "let through", _SOFT_REFUSES_NOTHING)
        elif self._peeking:
            _write_block_line(self.request, result, "looked at", _LOOK_REFUSES_NOTHING)

    def _soft(self, cached: bool) -> frozenset[str]:
        """The soft policies' names when the cache answered (it does not look at them)."""
        return self._soft_names() if cached else frozenset()

    def _soft_names(self) -> frozenset[str]:
        """The names of the policies checked soft (``block=False``): they refuse nothing."""
        return frozenset(limit.policy for c in self.checks if c.soft for limit in c.limits)

    def failed(self, error: BackendError, cache: DenialCache | None = None) -> Verdict:
        breaker.failure(error)
        _breaker_heard(self.observer)
        if cache is not None:  # Redis fails: fail open or closed, as without the cache
            cache.clear()
        return self._refused(error)

    def _refused(self, error: BackendError) -> Verdict:
        verdict = Verdict(
            self.applied,
            error=error,
            considered=self.considered,
            effective=self.effective,
            unanswered=_names(self.applied),
        )
        if self.observer is not None:
            metrics.record_failure(self.observer, self.applied)
        if unsignalled := _unsignalled(self.request, self.applied):
            self._signal(
                signals.backend_failed,
                error=error,
                policies=unsignalled,
                fail_closed=verdict.failed_closed(_names(unsignalled)),
            )
        return verdict

    def _signal(self, signal: Signal, **named: object) -> None:
        """Send ``signal`` for this request, or keep it for :meth:`run` or :meth:`arun`
        to send: until :meth:`run` starts (a refusal of the constructor), or all along
        :meth:`arun`."""
        if self._unsent is None:
            signal.send(sender=PolicySpec, request=self.request, **named)
        else:
            self._unsent.append((signal, named))


#: The request's attribute naming the policies a ``backend_failed`` signal named already.
_SIGNALLED_FAILED: Final = "_ratelimits_failed_signalled"


def _unsignalled(request: HttpRequest, policies: tuple[PolicySpec, ...]) -> tuple[PolicySpec, ...]:
    """Of ``policies``, those no ``backend_failed`` named for ``request`` yet, noted now:
    a request Redis failed in two steps for the same policies (a login's look, then its
    failure's charge; a compat count, then a look) is signalled once."""
    told: frozenset[str] = getattr(request, _SIGNALLED_FAILED, frozenset())
    fresh = tuple(p for p in policies if p.name not in told)
    if fresh:
        setattr(request, _SIGNALLED_FAILED, told | _names(fresh))
    return fresh


async def _handing_over(verdict: Verdict, step: Awaitable[None]) -> None:
    """Await ``step``, taken between the engine's answer and handing ``verdict`` over.

    Should it raise (the request cancelled while a signal's receiver runs, say), the
    verdict never reaches the caller, which gives its concurrency slots back: they are
    given back here first.
    """
    try:
        await step
    except BaseException:
        if verdict.decision is not None and verdict.decision.held:
            await get_engine().arelease_shielded(verdict.decision.held)
        raise


def _breaker_heard(observer: metrics.Observer | None) -> None:
    """Tell the metrics the breaker's state after an engine call. The breaker is the
    process's: a call whose decision is not counted (a compat peek, a failed login's
    charge) may open or close it too, so it is told to the process's observer then."""
    if observer is None:
        observer = metrics.observer()
    if observer is not None:
        observer.breaker(breaker.is_open)


def _cache() -> DenialCache | None:
    """The cache of denials of the configured engine (None if off or no engine)."""
    try:
        return cache_for(get_engine())
    except BackendError:  # the engine's client could not be made: the call will say so
        return None


def _write_block_line(request: HttpRequest, result: LimitResult, done: str, then: str = "") -> None:
    """One line for a request a block refused (staff's, or a policy's ban), or one a look
    found blocked (``done``): the block, not a policy's rate. What the client sent is
    escaped: its path (``%0A`` is a line break in ``request.path``) and the identity (a
    header, a username) could otherwise forge lines of the log (as Django escapes the
    paths it logs)."""
    until = time.time() + result.retry_after
    logger.info(
        "%s %s %s: %s is blocked (by staff or a ban) until %s UTC%s",
        done,
        _escaped(request.method or ""),
        _escaped(request.path[:_LOGGED_PATH]),
        label(result.identity),
        time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(until)),
        then,
    )


#: What the line of a look that found a block adds: the look itself refused nothing.
_LOOK_REFUSES_NOTHING: Final = "; a look refuses nothing itself (the view decides)"
#: What the line of a block only ``block=False`` policies found adds.
_SOFT_REFUSES_NOTHING: Final = "; its policies here refuse nothing (block=False: the view decides)"
#: What the line of a compat charge whose caller decides adds (``is_ratelimited`` or
#: ``get_usage`` with ``increment=True``, the compat ``@ratelimit(block=False)``).
_COUNT_REFUSES_NOTHING: Final = "; a count refuses nothing itself (its caller decides)"


# How much of a refused request's path its log line shows.
_LOGGED_PATH: Final = 200


def _escaped(text: str) -> str:
    """``text`` for a log line: control characters and anything not ASCII escaped
    (``\\n``, ``\\x1b``, ``\\xe9``), so that no value a client sends starts a line."""
    return text.encode("unicode_escape").decode("ascii")


def _effective(
    policies: tuple[PolicySpec, ...], checks: list[Check]
) -> tuple[tuple[str, tuple[Limit, ...]], ...]:
    """By policy name, the limits ``checks`` hold where they are not the policy's own."""
    found: dict[str, dict[Limit, None]] = {}
    for check in checks:
        for limit in check.limits:
            found.setdefault(limit.policy, {})[limit] = None
    own = {p.name: p.limits for p in policies}
    return tuple(
        (name, tuple(limits)) for name, limits in found.items() if tuple(limits) != own.get(name)
    )


def _names(policies: tuple[PolicySpec, ...]) -> frozenset[str]:
    return frozenset(p.name for p in policies)


def _reads_user(policy: PolicySpec) -> bool:
    """Whether planning ``policy`` reads ``request.user``: to count by it, to exempt it, or
    to name the user behind an address in hit entries; or may read it: a key function or
    a cost function is the project's code, called with the request (on the event loop,
    the lazy user's first read would raise ``SynchronousOnlyOperation``)."""
    return (
        "user" in policy.key.identity_kinds
        or policy.key == KeyKind.CALLABLE
        or has_function(policy.name)
        or policy.exempt_staff
        or policy.exempt_superusers
        or policy.record_metadata != Recording.NONE
        or bool(policy.tiers)
    )


def _plan(
    request: HttpRequest,
    policies: Iterable[PolicySpec],
    behind: str | None = None,
    soft: frozenset[str] = frozenset(),
) -> tuple[tuple[PolicySpec, ...], list[Check], tuple[tuple[str, tuple[Limit, ...]], ...]]:
    """The policies that apply, their checks, and (:func:`_effective`) the limits of
    those checked under other rates than their own. A policy named in ``soft`` (not in
    shadow mode) is a check of its own per identity."""
    if not get_settings().enabled:
        return (), [], ()
    applied = tuple(p for p in policies if not _exempt(request, p))
    if not applied:
        return applied, [], ()
    varied = False  # an identity checked under a tier's or an override's rates
    overrides = not way_back(request)
    registry = get_registry()
    # By (identity, shadow, gate, the soft policy's name or None): the group's limits.
    groups: dict[tuple[Identity, bool, Gate | None, str | None], list[Limit]] = {}
    # What each limit of a group charges, for the groups where one charges more than 1.
    costs: dict[tuple[Identity, bool, Gate | None, str | None], list[int]] = {}
    # What each identity's policies record: the most any of them asks for (an identity
    # none of whose policies records hits is not in it). The engine makes one hit
    # entry of the identity's checks (enforced and shadow).
    recording: dict[Identity, Recording] = {}
    for policy in applied:
        cost = cost_of(request, policy)
        if cost == 0:  # its cost function says this request is free under it
            continue
        budget = _budget(policy)
        alone = policy.name if soft and policy.name in soft and not policy.shadow else None
        for identity in identities(request, policy):
            gate = gate_of(request, identity, budget)
            group = (identity, policy.shadow, gate, alone)
            own = limits_for(registry, request, policy, identity)
            varied = varied or own is not policy.limits
            limits = groups.setdefault(group, [])
            if cost != 1 or (costs and group in costs):  # no lookup when no cost is set
                costs.setdefault(group, [1] * len(limits)).extend(charges(cost, own))
            limits.extend(own)
            known = recording.get(identity, Recording.NONE)
            if policy.record_metadata.rank > known.rank:
                recording[identity] = policy.record_metadata
    heads = _heads(request, recording, behind) if recording else {}  # only those that record
    checks = [
        Check(
            i,
            tuple(limits),
            heads.get(i),
            g,
            shadow=s,
            record_every=recording.get(i) == Recording.EVERY,
            overrides=overrides,
            costs=tuple(costs.get((i, s, g, a), ())) if costs else (),
            soft=a is not None,
        )
        for (i, s, g, a), limits in groups.items()
    ]
    return applied, checks, _effective(applied, checks) if varied else ()


def gate_of(request: HttpRequest, identity: Identity, budget: Rate | None) -> Gate | None:
    """The identity budget ``identity`` must pass first: ``budget`` of the request's client
    IP, for a kind the client chooses (header, callable, user); None for the IP itself,
    or with no budget."""
    if budget is None or not gated(identity.kind):
        return None
    return Gate(ip_identity(request), budget)


def _budget(policy: PolicySpec) -> Rate | None:
    """The identity budget of ``policy``'s client-chosen identities, None if it has none."""
    if policy.identity_budget == "default":
        return get_settings().identity_budget_rate
    if policy.identity_budget == "off":
        return None
    return policy.identity_budget


def _exempt(request: HttpRequest, policy: PolicySpec) -> bool:
    if policy.exempt_staff or policy.exempt_superusers:
        user = getattr(request, "user", None)
        if policy.exempt_superusers and getattr(user, "is_superuser", False):
            return True
        if policy.exempt_staff and getattr(user, "is_staff", False):
            return True
    if policy.allow_cidrs:
        client = client_address(request)
        return client is not None and any(client in cidr for cidr in policy.allow_cidrs)
    return False


def _heads(
    request: HttpRequest, recorded: Iterable[Identity], behind: str | None
) -> dict[Identity, str]:
    """The head of each ``recorded`` identity's hit entry (engine/hits.py): ``behind``
    (else the user) behind an IP, the IP behind anything else; with the address when
    the IP is counted under its hash (HASH_IPS)."""
    ip, address = ip_identity(request).value, client_ip(request)  # one cached lookup
    kept = address if address != ip else ""
    method, path = request.method, request.path
    heads = {}
    under_ip = ""  # the head of every identity but the IP, made once
    for identity in recorded:
        if identity.kind != "ip":
            under_ip = under_ip or entry_head(ip_behind(ip), method, path, kept)
            heads[identity] = under_ip
            continue
        if behind is None:
            user = getattr(request, "user", None)
            behind = user_behind(user.pk if user is not None and user.is_authenticated else None)
        heads[identity] = entry_head(behind, method, path, kept)
    return heads
