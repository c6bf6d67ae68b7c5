"""Each worker's cache of denials: an identity the engine denied is refused here
until its retry time, without Redis (issue 12; ``docs/flood.md``).

:func:`decide` asks :meth:`DenialCache.refuse` before the engine and tells
:meth:`DenialCache.learn` the engine's answer. What is cached: for each
(identity, limit) of an enforced policy that the engine denied, until when
(the retry time the engine gave, counted from before the call was sent, so the
cache never refuses longer than Redis would), and whether a staff block (or a
ban) denied it (a block is cached until its end, and never refuses a request on its
way back to admin: :mod:`django_ratelimits.way_back`). A limit is a policy's
rate, algorithm and burst, so a policy edit leaves its old entries unused. An entry
keeps what the denied request cost under its limit, and refuses only requests that
cost as much or more (a cheaper one may fit before the retry time).

A denial by a policy that bans (docs/bans.md) is not cached, and no check with a
banning limit is answered here (nor a look beside one) but by a block: the check
script counts each denial towards the ban, which then is a block, cached like
staff's. Another limit's cached denial answering for the check would keep the
denials from the script, and the ban from ever landing.

Bounded: at most ``DENIAL_CACHE`` entries (least recently used first out;
0 turns the cache off), each held at most :data:`HOLD_MAX_US`.

A Redis failure (an engine call's, or the epoch's) drops every entry.

Staff's writes bump the epoch in Redis (:mod:`django_ratelimits.engine.denials`);
the cache reads it at most every ``POLICY_REFRESH`` seconds, before an engine
call, while it holds entries or has denials to learn, and drops every entry
when it changed. An entry is learnt only under an epoch read before its
engine call, so a lift can never be missed by an answer that crossed it.

The offender records count the refusals made here in batches: when
:data:`BATCH_REQUESTS` are pending, when the oldest pending one is
:data:`BATCH_US` old (checked on the next request), and when the process exits.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import threading
import time
from collections import OrderedDict, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple

from django_ratelimits.conf import get_settings
from django_ratelimits.engine import Check, Decision, Engine, Identity, Limit, LimitResult
from django_ratelimits.engine.denials import Denials, Tally
from django_ratelimits.engine.errors import BackendError
from django_ratelimits.engine.hits import DENIED, full_entry
from django_ratelimits.engine.overrides import BLOCKED_POLICY

__all__ = [
    "BATCH_REQUESTS",
    "BATCH_US",
    "HOLD_MAX_US",
    "DenialCache",
    "Sending",
    "cache_for",
]

logger = logging.getLogger("django_ratelimits")

BATCH_REQUESTS: Final = 100
"""Pending local refusals that make the cache record a batch at once."""
BATCH_US: Final = 1_000_000
"""How old the oldest pending local refusal may grow before a batch is recorded."""
HOLD_MAX_US: Final = 60_000_000
"""The longest an entry refuses without Redis (a long block is asked again then)."""


class Sending(NamedTuple):
    """An engine call as the cache saw it go: the epoch it learns under, when, and the
    checks it sent (what each limit's request cost, which its denial holds for)."""

    epoch: int | None
    at_us: int
    checks: Sequence[Check]


@dataclass(frozen=True)
class _Entry:
    hold_us: int  # on the cache's clock: refused here until then (at most HOLD_MAX_US)
    until_us: int  # the retry time, from before the engine call was sent
    slack_us: int  # how long that call took: Retry-After adds it, never too early
    reset_until_us: int
    remaining: int
    blocked: bool
    cost: int  # what the denied request cost under the limit (a block: 0, it refuses all)
    origin_us: int  # Redis' time of the denial (engine/denials.py: batches)
    learnt_us: int  # on the cache's clock, when Redis' time was origin_us (about)
    epoch: int

    def redis_now_us(self, now: int) -> int:
        """Redis' time when the cache's clock says ``now``, as well as it is known."""
        return self.origin_us + now - self.learnt_us


class DenialCache:
    """The denials one process remembers for one engine (thread-safe)."""

    def __init__(self, engine: Engine, size: int) -> None:
        self.engine = engine
        self.size = size
        self.denials = Denials(engine, metadata_ttl=get_settings().metadata_ttl)
        self._entries: OrderedDict[tuple[Identity, Limit], _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self._epoch: int | None = None
        self._epoch_at: int | None = None  # when it was last read (or tried)
        self._reading = threading.Lock()  # held by the one read of the epoch in flight
        self._wanted = False  # a denial came that could not be learnt: read the epoch
        self._pending: defaultdict[tuple[Identity, int], Tally] = defaultdict(Tally)
        self._pending_requests = 0
        self._pending_since = 0

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Forget every cached denial: Redis failed (or was written by hand; a new
        epoch in Redis does the same in every process)."""
        with self._lock:
            self._entries.clear()

    def now_us(self) -> int:
        """The cache's clock: the engine's test clock if it has one, else monotonic."""
        clock = self.engine.clock
        return clock.now_us() if clock is not None else time.monotonic_ns() // 1000

    # ------------------------------------------------------------------ the epoch

    def epoch_due(self) -> bool:
        """Whether the epoch must be read before the next engine call (no I/O)."""
        if not (self._entries or self._wanted):
            return False
        at = self._epoch_at
        return at is None or self.now_us() - at >= get_settings().policy_refresh * 1_000_000

    def read_epoch(self, *, wait: bool = False) -> None:
        """Read the epoch; a new one drops every entry, and so does Redis failing (then
        fail-open and fail-closed decide, as without the cache), the epoch being tried
        again after ``POLICY_REFRESH``, not on every request of an outage.

        One read at a time, so that reads are stored in the order Redis answered them:
        of two at once, one from before staff's reset could end last and put the old
        epoch back (an answer sent before the reset would then be learnt under it).
        While another thread reads, a request goes on without reading; with ``wait``
        (after staff's own write in this process) it waits, then reads afresh."""
        if not self._reading.acquire(blocking=wait):
            return
        try:
            at = self.now_us()
            try:
                epoch = self.denials.epoch()
            except BackendError as error:
                logger.warning(
                    "could not read the denial epoch, dropping cached denials: %s", error
                )
                with self._lock:
                    self._entries.clear()
                    self._epoch_at = at
                return
            with self._lock:
                if epoch != self._epoch:
                    self._entries.clear()
                self._epoch, self._epoch_at, self._wanted = epoch, at, False
        finally:
            self._reading.release()

    def sending(self, checks: Sequence[Check]) -> Sending:
        """What an engine call sent now with ``checks`` learns under: the epoch (read,
        if due, just before; None if never read, and then nothing is learnt), the time,
        and the checks (what each limit's request cost)."""
        return Sending(self._epoch, self.now_us(), checks)

    # ------------------------------------------------------------------ refusing

    def refuse(
        self, checks: Sequence[Check], *, count: bool = True, look: bool = False
    ) -> Decision | None:
        """The cached denials of these checks, as the engine's answer, if every
        enforced check (identity) has one in force now: otherwise Redis decides, so
        that an identity it would admit is charged and one it would deny recorded,
        as without the cache. For a ``look`` (a peek: it charges no one) one enforced
        check with a cached denial is enough. Shadow checks are not looked at, nor
        soft ones beside a check that refuses (a soft check's denial refuses nothing,
        so it never answers for the others; and a request they refuse charges it
        nothing); a block only for a check overrides decide. With ``count`` (a
        refused request, not a question) the refusal goes in the next batch.
        A denial refuses only requests that cost at least what the denied one did
        under its limit (a cheaper one may fit before the retry time).
        """
        if not self._entries:
            return None
        now = self.now_us()
        results: list[LimitResult] = []
        heads: dict[Identity, str] = {}
        refusing = any(not (c.shadow or c.soft) for c in checks)
        with self._lock:
            for check in checks:
                if check.shadow or (check.soft and refusing):
                    continue
                found = self._denials(check, now)
                if check.overrides and _bans(check) and not any(r.blocked for r in found):
                    # The script counts each denial of a banning limit towards its ban
                    # (a look's too, once the login records it): only the ban, a block,
                    # answers here for a check with one, and for a look beside it.
                    return None
                if not found:
                    if look:
                        continue
                    return None
                results += found
                if check.metadata is not None:
                    heads[check.identity] = check.metadata
            if not results:
                return None
            if count:
                self._count(results, heads, now)
            redis_now = max(self._entries[(r.identity, r.limit)].redis_now_us(now) for r in results)
        return Decision(tuple(results), redis_now)

    def _denials(self, check: Check, now: int) -> list[LimitResult]:
        """The cached denials of ``check`` in force now, as results (lock held)."""
        results = []
        costs = check.costs
        for i, limit in enumerate(check.limits):
            key = (check.identity, limit)
            entry = self._entries.get(key)
            if entry is None:
                continue
            if entry.epoch != self._epoch or entry.hold_us <= now:
                del self._entries[key]
                continue
            if entry.blocked and not check.overrides:
                continue
            if (costs[i] if costs else 1) < entry.cost:  # a cheaper request: Redis decides
                continue
            self._entries.move_to_end(key)
            retry = entry.until_us + entry.slack_us - now
            reset = max(retry, entry.reset_until_us + entry.slack_us - now)
            results.append(
                LimitResult(
                    check.identity, limit, False, entry.remaining, retry, reset, entry.blocked
                )
            )
        return results

    def _count(self, results: list[LimitResult], heads: dict[Identity, str], now: int) -> None:
        """One refused request in the pending batch: once per identity, once per
        policy, and a hit entry for each identity whose policies record one.

        An identity's denials may have been learnt from different engine calls: the
        request is filed under the earliest (the batch adds to a record only if its
        first denial is no later), never once per call."""
        by_identity: dict[Identity, list[tuple[LimitResult, _Entry]]] = defaultdict(list)
        for result in results:
            by_identity[result.identity].append(
                (result, self._entries[(result.identity, result.limit)])
            )
        for identity, found in by_identity.items():
            origin_ms = min(entry.origin_us for _, entry in found) // 1000
            at_ms = max(entry.redis_now_us(now) for _, entry in found) // 1000
            names = dict.fromkeys(
                (BLOCKED_POLICY if result.blocked else result.limit.policy for result, _ in found),
                DENIED,
            )
            tally = self._pending[identity, origin_ms]
            tally.requests += 1
            tally.last_ms = max(tally.last_ms, at_ms)
            for policy in names:
                tally.policies[policy] += 1
            head = heads.get(identity)
            if head is not None:
                tally.hits.append(full_entry(head, at_ms, DENIED, names))
                if len(tally.hits) > self.engine.metadata_max_entries:
                    del tally.hits[0]
        if not self._pending_requests:
            self._pending_since = now
        self._pending_requests += 1

    # ------------------------------------------------------------------ learning

    def learn(self, decision: Decision, enforced: frozenset[str], sent: Sending) -> None:
        """Remember the denials of ``decision`` by the policies ``enforced``, for the
        call ``sent``. A denial while the epoch is unknown asks for it instead: the
        next call reads it, and learns."""
        if all(r.allowed or r.limit.policy not in enforced for r in decision.results):
            return
        if sent.epoch is None:
            self._wanted = True
            return
        sent_us = sent.at_us
        slack = max(0, self.now_us() - sent_us)
        costs = _costs(sent.checks)
        with self._lock:
            if sent.epoch != self._epoch:
                return
            for r in decision.results:
                # A concurrency denial ends when a slot is released, not at a time; so
                # does a login held back by those in flight, which is no denial.
                if (
                    r.allowed
                    or r.limit.policy not in enforced
                    or r.limit.is_concurrency
                    or r.held_back
                ):
                    continue
                if r.limit.ban is not None and not r.blocked:
                    # A banning policy's denials must reach the check script, which
                    # counts them towards the ban; the ban, a block, is cached.
                    continue
                # Until its retry time a denial of cost c (c - 1 left at most, on any
                # algorithm) holds for every request of cost c or more, never for a
                # cheaper one, which may fit sooner: the entry keeps c.
                cost = 0 if r.blocked else costs.get((r.identity, r.limit))
                if cost is None:  # an identity no check names (a gate's fallback): not learnt
                    continue
                key = (r.identity, r.limit)
                self._entries[key] = _Entry(
                    hold_us=sent_us + min(r.retry_after_us, HOLD_MAX_US),
                    until_us=sent_us + r.retry_after_us,
                    slack_us=slack,
                    reset_until_us=sent_us + r.reset_after_us,
                    remaining=r.remaining,
                    blocked=r.blocked,
                    cost=cost,
                    origin_us=decision.now_us,
                    learnt_us=sent_us,
                    epoch=sent.epoch,
                )
                self._entries.move_to_end(key)
                if len(self._entries) > self.size:
                    self._entries.popitem(last=False)

    # ------------------------------------------------------------------ batches

    def flush_due(self) -> bool:
        """Whether the pending refusals should be recorded now (no I/O)."""
        if not self._pending_requests:
            return False
        if self._pending_requests >= BATCH_REQUESTS:
            return True
        return self.now_us() - self._pending_since >= BATCH_US

    def flush(self) -> None:
        """Record the pending refusals in the offender records (logged if Redis fails:
        those counts are then lost, never retried without bound)."""
        with self._lock:
            batch, self._pending = self._pending, defaultdict(Tally)
            self._pending_requests = 0
        if not batch:
            return
        try:
            self.denials.record(batch)
        except BackendError as error:
            logger.warning("could not record %d identities' denials: %s", len(batch), error)

    async def aflush(self) -> None:
        await asyncio.to_thread(self.flush)

    async def aread_epoch(self) -> None:
        await asyncio.to_thread(self.read_epoch)

    def forked(self) -> None:
        """In a forked child (a pre-forking server's worker): locks a thread of the
        parent held stay held for good, so the child takes locks of its own; the
        entries and pending refusals are the parent's, which the parent records."""
        self._lock, self._reading = threading.Lock(), threading.Lock()
        self._entries.clear()
        self._pending.clear()
        self._pending_requests = 0


def _costs(checks: Sequence[Check]) -> dict[tuple[Identity, Limit], int]:
    """What a request of ``checks`` costs under each (identity, limit): the check's own
    cost for it, else the call's (:meth:`Check.charges`), which is 1 on every path the
    cache answers (a check, a login's look; a compat peek's 0 is never denied). The
    most, should two checks name one."""
    costs: dict[tuple[Identity, Limit], int] = {}
    for check in checks:
        for limit, cost in zip(check.limits, check.charges(1), strict=True):
            key = (check.identity, limit)
            costs[key] = max(cost, costs.get(key, 0))
    return costs


def _bans(check: Check) -> bool:
    """Whether a limit of ``check`` bans (docs/bans.md)."""
    return any(limit.ban is not None for limit in check.limits)


_current: DenialCache | None = None
_current_lock = threading.Lock()


def cache_for(engine: Engine) -> DenialCache | None:
    """This process's cache for ``engine``, None when ``DENIAL_CACHE`` is 0.

    A new engine (the settings changed) gets a new cache; the old one's pending
    refusals are recorded first (an old cache left by ``DENIAL_CACHE`` = 0 is
    recorded at exit)."""
    global _current
    size = get_settings().denial_cache
    if not size:
        return None
    current = _current
    if current is not None and current.engine is engine and current.size == size:
        return current
    with _current_lock:
        current = _current
        if current is None or current.engine is not engine or current.size != size:
            if current is not None:
                current.flush()
            current = _current = DenialCache(engine, size)
    return current


@atexit.register
def _flush_at_exit() -> None:
    if _current is not None:
        _current.flush()


def _after_fork() -> None:
    """A forked child takes locks of its own (:meth:`DenialCache.forked`)."""
    global _current_lock
    _current_lock = threading.Lock()
    if _current is not None:
        _current.forked()


os.register_at_fork(after_in_child=_after_fork)
