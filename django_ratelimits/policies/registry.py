"""The registry of policy rows: compiled once, held in memory, matched with no I/O.

Refreshing. :meth:`PolicyRegistry.refresh` reads the one-row version stamp
(:class:`~django_ratelimits.models.PolicyVersion`, changed in the same
transaction as every edit) and reloads the enabled policies only when it
changed. Callers refresh when :meth:`~PolicyRegistry.is_stale` says
``POLICY_REFRESH`` seconds have passed, so a worker costs the database one
tiny query per interval and an admin edit reaches it within that interval.
Sync code calls :func:`current`; async code awaits :func:`acurrent`.

Matching. Each reload builds an immutable snapshot, swapped in whole, so
readers never lock. :meth:`~PolicyRegistry.match` answers from a bounded LRU
cache keyed by ``(path, method)`` (``functools.lru_cache``, thread-safe,
dropped with its snapshot). On a miss, the path is not tested against every
pattern: a pattern anchored with ``^`` or ``\\A`` contributes its literal
prefix (``^/api/v1/`` gives ``/api/v1/``, see
:func:`~django_ratelimits.policies.matching.literal_prefix`) to an index of
prefixes grouped by length (:class:`~django_ratelimits.policies.matching.PathIndex`),
so only the patterns whose prefix starts the path, plus the few with no usable
prefix, are searched (by RE2, in time linear in the path). Paths longer than 256
characters are not cached, so hostile URLs cannot grow the cache beyond about a
megabyte.

Blocked networks. The same refresh reloads the enabled, unexpired
:class:`~django_ratelimits.models.BlockedNetwork` rows (their edits change the
same stamp) into a :class:`~django_ratelimits.policies.networks.NetworkIndex`;
:meth:`~PolicyRegistry.blocked` answers from it with no I/O, on ``wall_clock``
(seconds since the epoch; tests inject their own), and prunes it at its next
expiry.

Identity overrides (:mod:`~django_ratelimits.policies.rate_overrides`) load with
the policies, into one table: :meth:`PolicyRegistry.own_limits` is a dict
lookup, and an override stops applying at its expiry on ``wall_clock`` without a
reload.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Final

from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError
from django.db import Error as DatabaseFailure
from django.db import router, transaction
from django.dispatch import Signal

from django_ratelimits.conf import get_settings
from django_ratelimits.engine import Identity, Limit
from django_ratelimits.models import (
    BlockedNetwork,
    Policy,
    PolicyVersion,
    RateOverride,
    epoch_seconds,
    spec_fields,
    stored_time,
)
from django_ratelimits.policies.matching import CACHE_PATH_MAX, PathIndex
from django_ratelimits.policies.networks import BlockedEntry, IPAddress, NetworkIndex, parse_network
from django_ratelimits.policies.rate_overrides import OverrideTable, OwnRates
from django_ratelimits.policies.spec import PolicySpec

__all__ = ["CACHE_PATH_MAX", "PolicyRegistry", "acurrent", "current", "get_registry"]

# The name docs/policies.md promises (records name the package, not this module).
logger = logging.getLogger("django_ratelimits.policies")

CACHE_SIZE: Final = 4096
_NEVER: Final = object()


_METHODS_MAX = 16


def _order(spec: PolicySpec) -> tuple[int, str]:
    """Policies are evaluated (and reported in headers) highest priority first, then by
    name."""
    return -spec.priority, spec.name


class _Snapshot:
    """The enabled policies of one load, in order, with their path index."""

    def __init__(
        self,
        specs: Iterable[PolicySpec],
        row_names: frozenset[str],
        overrides: OverrideTable | None = None,
    ) -> None:
        self.ordered = tuple(sorted(specs, key=_order))
        self.overrides = overrides or OverrideTable((), ())
        self.by_name: Mapping[str, PolicySpec] = {spec.name: spec for spec in self.ordered}
        # Names that a row decides (enabled and compiled, or disabled): declared
        # defaults apply only to the other names.
        self.row_names = row_names
        # Per method, built on first use; past _METHODS_MAX methods (any token is a
        # method to HTTP), one index of every method's policies serves the others.
        # Failed-login policies count logins (django_ratelimits.logins), never by path.
        self.requests = tuple(spec for spec in self.ordered if not spec.failed_logins)
        self.logins = tuple(spec for spec in self.ordered if spec.failed_logins)
        self._any_method = PathIndex(self.requests, None)
        self._indexes: dict[str, PathIndex[PolicySpec]] = {}
        self.cached_match = functools.lru_cache(maxsize=CACHE_SIZE)(self.match)

    def answer(self, path: str, method: str) -> tuple[PolicySpec, ...]:
        """:meth:`match`, from the cache for a path not over ``CACHE_PATH_MAX``."""
        if len(path) > CACHE_PATH_MAX:
            return self.match(path, method)
        return self.cached_match(path, method)

    def either(
        self, found: tuple[PolicySpec, ...], more: tuple[PolicySpec, ...]
    ) -> tuple[PolicySpec, ...]:
        """The policies of ``found`` and ``more`` (two answers of :meth:`match`), each
        once, in order."""
        seen = {spec.name for spec in found}
        extra = [spec for spec in more if spec.name not in seen]
        if not extra:
            return found
        return tuple(sorted((*found, *extra), key=_order))

    def match(self, path: str, method: str) -> tuple[PolicySpec, ...]:
        index = self._indexes.get(method)
        if index is None:
            if len(self._indexes) >= _METHODS_MAX:
                return self._any_method.match(path, method)
            # Racing threads build equal indexes; either one is kept.
            index = self._indexes[method] = PathIndex(self.requests, method)
        return index.match(path)


class PolicyRegistry:
    """The enabled policies of one process, refreshed from the database on demand.

    ``clock`` (seconds, monotonic) decides staleness, ``wall_clock`` (seconds
    since the epoch) when blocked networks and identity overrides expire; tests
    inject their own.
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._clock = clock
        self.wall_clock = wall_clock
        self._blocklist = NetworkIndex()
        self._blocklist_lock = threading.Lock()
        self._lock = threading.Lock()
        self._declare_lock = threading.Lock()
        self._snapshot = _Snapshot((), frozenset())
        self._stamp: object = _NEVER
        self._refreshed_at: float | None = None
        self._generation = 0
        self._declared: dict[str, PolicySpec] = {}
        self._unwritten: dict[str, PolicySpec] = {}
        self._refused_bans: dict[str, ValidationError] = {}
        # Why the last refresh could not read the database, None once one could.
        self.failure: str | None = None
        self._loaded = False

    @property
    def loaded(self) -> bool:
        """Whether the policy rows were ever read: False while the database has been
        unreachable since the process started (only code-declared defaults apply)."""
        return self._loaded

    def is_stale(self) -> bool:
        """Whether ``POLICY_REFRESH`` seconds have passed since the last refresh. No I/O."""
        at = self._refreshed_at
        return at is None or self._clock() - at >= get_settings().policy_refresh

    def refresh(self) -> None:
        """Write declared defaults, then reload if the version stamp changed.

        Thread-safe; a caller that waited while another thread refreshed
        returns at once. Database errors keep the loaded policies and are logged.
        """
        generation = self._generation
        with self._lock:
            if generation != self._generation:
                return
            try:
                self._write_declared()
            except DatabaseFailure as exc:  # e.g. a read-only database: still read policies
                logger.error("could not create the rows of declared rate-limit policies: %s", exc)
            try:
                stamp = PolicyVersion.current()
                if stamp != self._stamp:
                    self._snapshot = self._load()
                    self._loaded = True
                    blocklist = self._load_blocklist()
                    if blocklist is not None:  # else the next interval tries again
                        with self._blocklist_lock:
                            self._blocklist = blocklist
                        self._stamp = stamp
                self.failure = None
            except DatabaseFailure as exc:  # OperationalError, InterfaceError (a closed
                # connection): any of them would otherwise be a 500 on every request
                self.failure = f"{type(exc).__name__}: {exc}"
                logger.error(
                    "could not refresh rate-limit policies, keeping the %d loaded%s: %s",
                    len(self._snapshot.ordered),
                    "" if self.loaded else " (none: the database was never read)",
                    exc,
                )
            finally:
                self._refreshed_at = self._clock()
                self._generation += 1

    def match(
        self, path: str, method: str, unprefixed: str | None = None
    ) -> tuple[PolicySpec, ...]:
        """Enabled policies whose path pattern matches and method applies, in order. No I/O.

        ``unprefixed`` is ``path`` without its language prefix, on a site that serves
        pages under one (:func:`~django_ratelimits.resolved.unprefixed`): a policy
        matches when its pattern matches either, and is listed once."""
        snapshot, method = self._snapshot, method.upper()
        found = snapshot.answer(path, method)
        if unprefixed is None:
            return found
        more = snapshot.answer(unprefixed, method)
        return snapshot.either(found, more) if found and more else found or more

    def blocked(self, address: IPAddress) -> BlockedEntry | None:
        """The live blocklist entry holding ``address``, if any. No I/O."""
        now = self.wall_clock()
        index = self._blocklist
        if now >= index.next_expiry:
            with self._blocklist_lock:  # a refresh may have swapped in a newer index
                if self._blocklist is index:
                    self._blocklist = index.pruned(now)
                index = self._blocklist
        return index.find(address, now)

    @property
    def blocklist(self) -> NetworkIndex:
        """The blocked networks of the last load (expired ones pruned by :meth:`blocked`)."""
        return self._blocklist

    def all(self) -> tuple[PolicySpec, ...]:
        """Every enabled policy, then declared defaults that have no row. No I/O."""
        snapshot = self._snapshot
        declared = tuple(
            spec for name, spec in sorted(self._declared.items()) if name not in snapshot.row_names
        )
        return snapshot.ordered + declared

    def failed_logins(self) -> tuple[PolicySpec, ...]:
        """The enabled policies that count failed logins, in order. No I/O."""
        return self._snapshot.logins

    def counting(self, kind: str) -> tuple[PolicySpec, ...]:
        """The policies of :meth:`all` that count identities of ``kind`` (``"ip"``...)."""
        return tuple(spec for spec in self.all() if kind in spec.key.identity_kinds)

    def get(self, name: str) -> PolicySpec | None:
        """The enabled policy ``name``, else its declared default if no row has that name."""
        snapshot = self._snapshot
        spec = snapshot.by_name.get(name)
        if spec is not None or name in snapshot.row_names:
            return spec
        return self._declared.get(name)

    def own_limits(self, policy: str, identity: Identity) -> tuple[Limit, ...] | None:
        """``identity``'s override limits under ``policy`` now, None if none. No I/O."""
        overrides = self._snapshot.overrides
        return overrides.limits(policy, identity, self.wall_clock()) if overrides else None

    def every_limit(self, spec: PolicySpec, identity: Identity) -> list[Limit]:
        """Every limit ``spec`` may have counted ``identity`` under: the policy's own
        rates, its tiers' and the identity's override's (each rate keeps its own state),
        for a reset or an erasure to clear them all. No I/O."""
        own = self.own_limits(spec.name, identity) or ()
        return [limit for group in (spec.limits, *spec.tier_limits, own) for limit in group]

    def override_count(self) -> int:
        """How many (policy, identity) overrides were loaded (expired or not since)."""
        return len(self._snapshot.overrides)

    def names(self) -> tuple[str, ...]:
        """Every name :meth:`knows`, sorted. No I/O."""
        return tuple(sorted(self._snapshot.row_names | self._declared.keys()))

    def declared(self, name: str) -> PolicySpec | None:
        """The default code declared as ``name`` (``@ratelimit(rate=...)``), row or no row.
        No I/O."""
        return self._declared.get(name)

    def knows(self, name: str) -> bool:
        """Whether a row (enabled or disabled) or a declared default is named ``name``. No I/O."""
        return name in self._snapshot.row_names or name in self._declared

    def declare(self, spec: PolicySpec) -> None:
        """A default from code: used until a row exists, written as a row at the next refresh."""
        with self._declare_lock:
            self._declared[spec.name] = spec
            self._unwritten[spec.name] = spec

    def refuse_ban(self, name: str, error: ValidationError) -> None:
        """Note that code declared policy ``name`` with a ban it cannot have
        (``error``): the policy is declared without it, and check E010 says so."""
        with self._declare_lock:
            self._refused_bans[name] = error

    def refused_bans(self) -> dict[str, ValidationError]:
        """The declared policies whose ban was refused, by name (:meth:`refuse_ban`)."""
        with self._declare_lock:
            return dict(self._refused_bans)

    def _write_declared(self) -> None:
        """``get_or_create`` each declared policy's row, once per process.

        The savepoint keeps a failure from breaking the caller's transaction.
        """
        with self._declare_lock:
            pending = list(self._unwritten.values())
        for spec in pending:
            with transaction.atomic(using=router.db_for_write(Policy)):
                Policy.objects.get_or_create(name=spec.name, defaults=spec_fields(spec))
            with self._declare_lock:
                if self._unwritten.get(spec.name) is spec:
                    del self._unwritten[spec.name]

    def _load(self) -> _Snapshot:
        specs, names = [], set()
        for row in Policy.objects.prefetch_related("tiers"):
            if row.enabled:
                try:
                    specs.append(row.to_spec())
                except (ValidationError, ValueError, TypeError) as exc:
                    reason = "; ".join(exc.messages) if isinstance(exc, ValidationError) else exc
                    logger.error(
                        "rate-limit policy %r is invalid and skipped: %s", row.name, reason
                    )
                    continue
            names.add(row.name)
        return _Snapshot(specs, frozenset(names), OverrideTable(self._own_rates(), specs))

    def _own_rates(self) -> Iterable[OwnRates]:
        """The identity overrides not yet expired; an invalid one is logged and skipped."""
        # With USE_TZ = False the database holds the wall times of TIME_ZONE (not of
        # a time zone a request activated).
        now = stored_time(datetime.fromtimestamp(self.wall_clock(), tz=UTC))
        rows = RateOverride.objects.filter(expires_at__gt=now).select_related("policy")
        for row in rows.order_by("created_at", "pk"):
            try:
                yield row.to_own_rates()
            except (ValidationError, ValueError) as exc:
                logger.error(
                    "identity override %s (id %s) is invalid and skipped: %s", row, row.pk, exc
                )

    def _load_blocklist(self) -> NetworkIndex | None:
        """The enabled blocked networks, or None if their table cannot be read (policies
        still apply: a deploy that has not run this migration yet keeps its limits)."""
        entries = []
        try:
            query = BlockedNetwork.objects.filter(enabled=True)
            rows = list(query.values_list("pk", "network", "reason", "expires_at"))
        except DatabaseFailure as exc:
            logger.error(
                "could not load the blocked networks, keeping the %d loaded "
                "(has manage.py migrate run?): %s",
                len(self._blocklist),
                exc,
            )
            return None
        for pk, text, reason, expires in rows:
            try:
                network = parse_network(text)
            except ValidationError:  # written around clean(): raw SQL, bulk_create
                logger.error("blocked network %r (row %s) is invalid and skipped", text, pk)
                continue
            at = None if expires is None else epoch_seconds(expires)
            entries.append(BlockedEntry(network, reason, at, pk))
        return NetworkIndex(entries, self.wall_clock())


_registry = PolicyRegistry()

#: Sent after each refresh of the process's registry, with ``failed``: whether it could
#: not read the database (:attr:`PolicyRegistry.failure`). The metrics' gauge listens
#: (django_ratelimits.metrics, a layer above).
refreshed = Signal()


def _refreshed(registry: PolicyRegistry) -> None:
    refreshed.send(sender=PolicyRegistry, failed=registry.failure is not None)


def get_registry() -> PolicyRegistry:
    """The registry of this process."""
    return _registry


def current() -> PolicyRegistry:
    """The registry of this process, refreshed first if stale (sync code only)."""
    registry = _registry
    if registry.is_stale():
        registry.refresh()
        _refreshed(registry)
    return registry


async def acurrent() -> PolicyRegistry:
    """:func:`current` for async code: the database is read in a worker thread."""
    registry = _registry
    if registry.is_stale():
        await sync_to_async(registry.refresh)()
        _refreshed(registry)
    return registry
