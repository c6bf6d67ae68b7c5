"""The offenders service: list, inspect, reset, block, allow-list, lift and forget
identities, and list the blocks and allow-listings in force.

The dashboard's views and ``manage.py ratelimits`` both go through
:class:`Offenders`; they only turn what it returns into pages or terminal
output. Reads go through :class:`~django_ratelimits.engine.offenders.OffenderReader`
(bounded: never KEYS or SCAN) and ``engine.peek``; writes through
:class:`~django_ratelimits.engine.controls.Controls` (and
:class:`~django_ratelimits.engine.erasure.Eraser` to forget), each followed by a bump of the
denial epoch, so every worker drops the denials it cached within ``POLICY_REFRESH``
(``docs/flood.md``). Every method raises
:class:`~django_ratelimits.exceptions.BackendError` when Redis fails.

A page of rows costs four round trips (one per node on a cluster, sent
together), however many rows it shows: Redis' time, the indexes, the
records, then the rows' metadata lists and overrides in one pipeline.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

from django.contrib.auth import get_user_model
from django.http import HttpRequest
from django.utils.translation import gettext, pgettext

from django_ratelimits.conf import get_settings
from django_ratelimits.deny_cache import cache_for
from django_ratelimits.effective import limits_for
from django_ratelimits.engine import Check, Engine, Identity, LimitResult, get_engine
from django_ratelimits.engine.controls import ActiveOverrides, Controls
from django_ratelimits.engine.denials import Denials
from django_ratelimits.engine.erasure import Erased, Eraser
from django_ratelimits.engine.hits import Hit, read_as
from django_ratelimits.engine.keys import ident
from django_ratelimits.engine.offenders import (
    SCAN_LIMIT,
    Offender,
    OffenderDetail,
    OffenderReader,
    Order,
)
from django_ratelimits.engine.overrides import BLOCKED_POLICY, Override
from django_ratelimits.identity import IPNetwork
from django_ratelimits.offenders.identities import counted_now
from django_ratelimits.offenders.operations import Action, Operation
from django_ratelimits.offenders.text import span
from django_ratelimits.policies import current
from django_ratelimits.policies.spec import GATED_KINDS
from django_ratelimits.rates import Rate

ROW_HITS = 100  # metadata entries read for each row of a page, newest first


class UnknownPolicy(ValueError):
    """A policy named that no enabled policy (or declared default) has; with
    ``recorded``, a filter of what policies did that no policy has at all (a row, enabled
    or disabled, or a declared default) and no denial ``recorded`` names either."""

    def __init__(self, name: str, *, recorded: str | None = None) -> None:
        if recorded is None:  # the dashboard's actions show it, in the active language
            known = ", ".join(policy_names()) or pgettext("no policies", "none")
            message = gettext("no enabled policy is named %(name)s (enabled: %(known)s)") % {
                "name": repr(name),
                "known": known,
            }
        else:  # only the command's filter (its output is English: no_translations)
            known = ", ".join(current().names()) or "none"
            message = f"no policy is named {name!r} and no {recorded} names it (policies: {known})"
        super().__init__(message)


@dataclass(frozen=True)
class Query:
    """Which offenders to list. ``user`` is a user identity's value (the pk); a
    ``network`` keeps the address groups inside it or holding it; ``hits`` is how many metadata
    entries to read per row (0: none). With ``shadow``, the identities that
    shadow-mode policies would have denied instead, from their own ledger: rows
    then count would-be denials."""

    period: int = 3600
    order: Order = "last"
    kind: str | None = None
    policy: str | None = None
    network: IPNetwork | None = None
    user: str | None = None
    offset: int = 0
    limit: int = 50
    hits: int = ROW_HITS
    shadow: bool = False


@dataclass(frozen=True)
class Row:
    """One offender of a listing with its recent hits and its override."""

    offender: Offender
    # None when the label no longer names it (a value cut short), or when no request is
    # counted as it any more (``stale``).
    identity: Identity | None
    hits: tuple[Hit, ...]  # newest first
    override: Override | None
    # Recorded as an address was counted before HASH_IPS or an address prefix changed:
    # its page would be another identity's (the address as counted now).
    stale: bool = False

    def detail(self) -> OffenderDetail:
        return OffenderDetail(self.offender, self.hits, self.override)

    @property
    def who(self) -> str:
        """How hit entries name the row's identity (:func:`~django_ratelimits.engine.hits.
        read_as`), which the pages' names are kept under; a row no identity stands behind,
        by its label."""
        return self.offender.label if self.identity is None else read_as(self.identity)


@dataclass(frozen=True)
class OffenderList:
    rows: tuple[Row, ...]
    total: int | None  # identities denied in the period; None for a user lookup
    now_ms: int
    has_next: bool


@dataclass(frozen=True)
class IdentityReport:
    """One identity: its record and hits, and its quota under each policy that counts it."""

    identity: Identity
    detail: OffenderDetail
    quotas: tuple[LimitResult, ...]
    now_ms: int
    # The policies under which the identity has its own rates (an identity override).
    overridden: frozenset[str] = frozenset()
    # The policies under which a user identity is in a tier (rates by group or plan).
    tiered: frozenset[str] = frozenset()


class Offenders:
    """The offenders of one engine's key space, and what staff do to them."""

    def __init__(self, engine: Callable[[], Engine] = get_engine) -> None:
        """``engine`` gives the engine when first needed, so that an argument
        refused (an unknown policy) is refused before Redis is set up."""
        self._engine = engine

    @cached_property
    def engine(self) -> Engine:
        return self._engine()

    @cached_property
    def reader(self) -> OffenderReader:
        return OffenderReader(self.engine)

    @cached_property
    def controls(self) -> Controls:
        return Controls(self.engine)

    @cached_property
    def eraser(self) -> Eraser:
        return Eraser(self.engine)

    @cached_property
    def denials(self) -> Denials:
        return Denials(self.engine)

    def listing(self, query: Query) -> OffenderList:
        """The rows ``query`` asks for, newest (or most denied) first.

        A ``query.policy`` may name any policy (a row, enabled or not, or a declared
        default), a block (:data:`BLOCKED_POLICY`), or a name only the records know (a
        group of the compat layer, which no registry holds, or a deleted row's): a
        name the registry does not know is taken if a denial recorded names it. Else it
        could match nothing, and :class:`UnknownPolicy` says so, rather than an empty
        listing that reads as "no offenders"."""
        self._record_pending()
        found, name = self._listing(query), query.policy
        if name is None or name == BLOCKED_POLICY or found.rows or current().knows(name):
            return found
        if self._recorded(name, query.shadow):  # nothing in this period, or on this page
            return found
        retention = span(self.engine.offender_retention)
        recorded = f"{'would-be ' if query.shadow else ''}denial of the last {retention}"
        raise UnknownPolicy(name, recorded=recorded)

    def _listing(self, query: Query) -> OffenderList:
        if query.user is not None:
            return self._user_lookup(query)
        reader, end = self.reader, query.offset + query.limit + 1  # one more tells has_next
        if query.network is not None:
            # The index knows nothing of networks: look down it as far as a policy
            # filter does, and keep the addresses inside.
            page = reader.page(
                period=query.period,
                order=query.order,
                limit=SCAN_LIMIT,
                kind="ip",
                policy=query.policy,
                shadow=query.shadow,
            )
            found = [o for o in page.offenders if _inside(o, query.network)]
            found = found[query.offset : end]
        else:
            page = reader.page(
                period=query.period,
                order=query.order,
                offset=query.offset,
                limit=query.limit + 1,
                kind=query.kind,
                policy=query.policy,
                shadow=query.shadow,
            )
            found = list(page.offenders)
        shown = found[: query.limit]
        details = reader.details(shown, hits=query.hits, now_ms=page.now_ms)
        rows = tuple(_row(o, d) for o, d in zip(shown, details, strict=True))
        return OffenderList(rows, page.total, page.now_ms, len(found) > query.limit)

    def inspect(self, identity: Identity) -> IdentityReport:
        """Everything known of ``identity``: record, hits, override, quota left now."""
        self._record_pending()
        registry = current()
        checks, overridden, tiered = [], set(), set()
        specs = registry.counting(identity.kind)
        # Its limits as its own requests would get them: an override, a user's tier, else
        # the policy's own rates.
        as_user = (_request_of(identity) if any(spec.tiers for spec in specs) else None) or (
            HttpRequest()
        )
        for spec in specs:
            limits = limits_for(registry, as_user, spec, identity)
            if any(limits is tier for tier in spec.tier_limits):
                tiered.add(spec.name)
            elif limits is not spec.limits:
                overridden.add(spec.name)
            checks.append(Check(identity, limits))
        quotas: tuple[LimitResult, ...] = ()
        if checks:
            decision = self.engine.peek(checks)  # Redis' time comes with it
            quotas, now_ms = decision.results, decision.now_us // 1000
        else:
            now_ms = self.reader.now_ms()
        detail = self.reader.detail(identity, now_ms=now_ms)
        return IdentityReport(
            identity, detail, quotas, now_ms, frozenset(overridden), frozenset(tiered)
        )

    def reset(
        self, identity: Identity, policy: str | None = None, *, forget: bool = False
    ) -> tuple[str, ...]:
        """Clear ``identity``'s counters under ``policy`` (or every policy: the enabled
        ones, and any other counter its state holds, the compat layer's included); the
        names of the enabled policies reset. Raises :class:`UnknownPolicy`."""
        registry = current()
        specs = registry.all()
        if policy is not None:
            specs = tuple(spec for spec in specs if spec.name == policy)
            if not specs:
                raise UnknownPolicy(policy)
        limits = [limit for spec in specs for limit in registry.every_limit(spec, identity)]
        self.controls.reset(identity, limits, forget=forget, every=policy is None)
        self._changed()
        return tuple(spec.name for spec in specs)

    def forget(self, identity: Identity) -> Erased:
        """Erase what Redis holds of ``identity``: its counters under every policy, its
        records, hits, override and index entries, and the hit entries of the identities
        its hits name that name it (:mod:`django_ratelimits.engine.erasure`)."""
        registry = current()
        specs = registry.all()
        limits = [limit for spec in specs for limit in registry.every_limit(spec, identity)]
        budgets = {get_settings().identity_budget_rate, *(s.identity_budget for s in specs)}
        rates = [b for b in budgets if isinstance(b, Rate)]
        erased = self.eraser.forget(identity, limits, rates, GATED_KINDS)
        self._changed()
        return erased

    def block(self, identity: Identity, seconds: float, *, by: str = "") -> None:
        """Deny every request of ``identity`` for ``seconds``; ``by`` is who does it."""
        self.controls.block(identity, seconds, by=by)
        self._changed()

    def allow(self, identity: Identity, seconds: float, *, by: str = "") -> None:
        """Admit every request of ``identity``, uncounted, for ``seconds``."""
        self.controls.allow(identity, seconds, by=by)
        self._changed()

    def lift(self, identity: Identity) -> Override | None:
        """End a block or allow-listing of ``identity``; the one in force that this call
        ended (None if none was, or another lift ended it first)."""
        ended = self.controls.lift(identity)
        self._changed()
        return ended

    def active(self, offset: int = 0, limit: int | None = None) -> ActiveOverrides:
        """The blocks and allow-listings in force, soonest to end first: ``limit`` of them
        from ``offset``, or every one."""
        return self.controls.active(offset, limit)

    def perform(self, operation: Operation, *, by: str = "") -> bool:
        """Do ``operation`` (see the methods above); ``by`` is who does it. False when
        there was nothing to do: a lift with no block or allow-listing in force."""
        identity, action = operation.identity, operation.action
        if action is Action.RESET:
            self.reset(identity, operation.policy, forget=operation.forget)
        elif action is Action.BLOCK:
            self.block(identity, operation.seconds or 0, by=by)
        elif action is Action.ALLOW:
            self.allow(identity, operation.seconds or 0, by=by)
        elif action is Action.FORGET:
            self.forget(identity)
        else:
            return self.lift(identity) is not None
        return True

    def _changed(self) -> None:
        """After a write to an identity: a new denial epoch, which every process reads
        within ``POLICY_REFRESH``, and this one now (its cached denials go at once)."""
        self.denials.bump()
        cache = cache_for(self.engine)
        if cache is not None:
            cache.read_epoch(wait=True)  # after a read in flight, which may be older

    def _record_pending(self) -> None:
        """This process's pending refusals into the records first, so that what it
        shows holds at least what it refused itself (other processes' batches come
        within a second: ``docs/flood.md``)."""
        cache = cache_for(self.engine)
        if cache is not None:
            cache.flush()

    def _recorded(self, policy: str, shadow: bool) -> bool:
        """Whether a denial (a would-be denial with ``shadow``) still recorded names
        ``policy``: as far back as the records go, and as far down the index as a
        filtered page looks."""
        page = self.reader.page(
            period=self.engine.offender_retention, limit=1, policy=policy, shadow=shadow
        )
        return bool(page.offenders)

    def _user_lookup(self, query: Query) -> OffenderList:
        identity = Identity("user", query.user or "")
        now = self.reader.now_ms()
        detail = self.reader.detail(identity, now_ms=now)
        offender = detail.shadow if query.shadow else detail.offender
        keep = (
            offender is not None
            and query.offset == 0
            and query.limit > 0
            and query.kind in (None, "user")
            and offender.last_ms >= now - query.period * 1000
            and (query.policy is None or query.policy in offender.by_policy)
        )
        hits = detail.hits[: query.hits]
        rows = (Row(offender, identity, hits, detail.override),) if keep and offender else ()
        return OffenderList(rows, None, now, False)


def policy_names() -> list[str]:
    """The names of the enabled policies (and declared defaults), in their order."""
    return [spec.name for spec in current().all()]


def _inside(offender: Offender, network: IPNetwork) -> bool:
    """Whether the address group ``offender`` names meets ``network``: lies inside it, or
    holds it (an address staff paste from a log, counted as its group: ``2001:db8::5``
    is in ``2001:db8::/64``)."""
    try:
        address = ipaddress.ip_network(offender.value, strict=False)
    except ValueError:  # "unknown", or a label cut short
        return False
    return address.version == network.version and address.overlaps(network)


def _row(offender: Offender, detail: OffenderDetail) -> Row:
    identity = Identity(offender.kind, offender.value)
    named = ident(identity) == offender.ident  # else a value cut short names another
    stale = named and not counted_now(identity)
    linked = identity if named and not stale else None
    return Row(offender, linked, detail.hits, detail.override, stale)


def _request_of(identity: Identity) -> HttpRequest | None:
    """A request by the user ``identity`` names, to choose its tiers as its own requests
    would (None for another kind of identity, or a user that no longer exists)."""
    if identity.kind != "user":
        return None
    user = get_user_model()._default_manager.filter(pk=identity.value).first()
    if user is None:
        return None
    request = HttpRequest()
    request.user = user
    return request
