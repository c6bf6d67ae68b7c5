"""Context managers for tests of a project's own limits, against its real Redis.

Each one is a context manager and a decorator of (sync) functions, and undoes
itself on exit, however the block ends:

* :func:`reset_ratelimits`: counters that start at zero, kept apart from every
  other test's (a key prefix of the block's own, whose keys are deleted on exit),
  and policy rows saved in the block seen at once;
* :func:`override_policies`: exactly these policies, in memory, seen at once by the
  middleware, ``@ratelimit`` and the DRF throttle;
* :func:`fake_clock`: the shared engine on a :class:`~.clock.FakeClock`;
* :func:`disable_ratelimits`: nothing is limited (``ENABLED`` off).

None adds a setting: a test turns them on in code, and system check
``django_ratelimits.E100`` fails ``manage.py check`` (and every command that runs
checks: ``runserver``, ``migrate``) in a process where one is left on.
"""

from __future__ import annotations

import contextvars
import logging
import secrets
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db.models.signals import post_delete, post_save
from django.test import override_settings
from redis.cluster import RedisCluster
from redis.exceptions import RedisError

from django_ratelimits import engine
from django_ratelimits.breaker import breaker
from django_ratelimits.conf import SETTING_NAME, get_settings
from django_ratelimits.engine.connection import get_redis
from django_ratelimits.models import STAMPED_MODELS
from django_ratelimits.policies import registry
from django_ratelimits.policies.declare import declared
from django_ratelimits.policies.registry import PolicyRegistry
from django_ratelimits.policies.spec import PolicySpec
from django_ratelimits.testing.clock import FakeClock

__all__ = ["active", "disable_ratelimits", "fake_clock", "override_policies", "reset_ratelimits"]

logger = logging.getLogger("django_ratelimits")

_DAY_US = 86_400 * 1_000_000
_active: list[str] = []  # what is on now, innermost last (system check E100 reads it)
_holder: contextvars.ContextVar[object] = contextvars.ContextVar("ratelimits_kit_holder")
_owner: object | None = None  # the holder token of the code that turned it on
_lock = threading.Lock()


def active() -> tuple[str, ...]:
    """The kit's context managers entered and not yet left in this process."""
    return tuple(_active)


@contextmanager
def _on(what: str) -> Iterator[None]:
    """Notes ``what`` as on in the block. The kit changes the whole process (its
    settings, registry and clock), and each part puts back on exit what it found on
    entry: two threads whose blocks overlap would leave the first one's state behind,
    limiting off for good. So it is refused in code that does not descend from the
    code that turned it on: another thread (a view or a task in a threaded server).
    What runs in that code's context may nest parts freely, an ``async`` test of a
    Django test case too (its event loop runs in another thread, in a copy of the
    test's context, while the test's thread waits)."""
    global _owner
    with _lock:
        if _active and _holder.get(None) is not _owner:
            on = ", ".join(f"{part}()" for part in _active)
            raise RuntimeError(
                f"django_ratelimits.testing: {what}() entered in a thread while another "
                f"thread has {on} on. The kit changes the whole process: use it from one "
                "test at a time, never in a view or a task."
            )
        if not _active:
            _owner = object()
            _holder.set(_owner)
        _active.append(what)
    try:
        yield
    finally:
        with _lock:
            _active.remove(what)
            if not _active:
                _owner = None


def _settings(**changes: object) -> override_settings:
    """``DJANGO_RATELIMITS`` as it is now, with ``changes``."""
    return override_settings(**{SETTING_NAME: {**getattr(settings, SETTING_NAME, {}), **changes}})


@contextmanager
def disable_ratelimits() -> Iterator[None]:
    """Limit nothing in the block: no policy is checked, no Redis call is made, and no
    policy is read from the database (a test without database access may use it)."""
    with _on("disable_ratelimits"), _settings(ENABLED=False), _pinned(()):
        yield


class _Pinned(PolicyRegistry):
    """A registry that holds the given policies and never reads the database.

    What code declares meanwhile (a view module's ``@ratelimit(rate=...)`` imported in
    the block, as a URLconf is on a test's first request) goes to the registry
    ``underneath``: a default declared into this one would be gone with it, and the
    process would never know the policy again."""

    def __init__(self, specs: tuple[PolicySpec, ...], underneath: PolicyRegistry) -> None:
        super().__init__()
        self._snapshot = registry._Snapshot(specs, frozenset(s.name for s in specs))
        self._underneath = underneath

    def declare(self, spec: PolicySpec) -> None:
        self._underneath.declare(spec)

    def refuse_ban(self, name: str, error: ValidationError) -> None:
        self._underneath.refuse_ban(name, error)

    def is_stale(self) -> bool:
        return False

    def refresh(self) -> None:
        return None

    def knows(self, name: str) -> bool:
        # A decorator naming another policy limits nothing here, as the test asked,
        # without logging that the policy does not exist.
        return True


@contextmanager
def override_policies(
    *policies: PolicySpec | Mapping[str, Any],
) -> Iterator[tuple[PolicySpec, ...]]:
    """Exactly ``policies`` apply in the block, instead of the database's rows and the
    decorators' defaults; seen at once, never read from the database.

    Each is a :class:`~django_ratelimits.policies.spec.PolicySpec` or a dict of the
    arguments ``@ratelimit`` takes, with the name: ``{"name": "api", "rate": "5/m",
    "path": "^/api/"}``. A mistake raises ``ValueError`` on entry. Yields the policies.
    """
    specs = tuple(p if isinstance(p, PolicySpec) else declared(**p) for p in policies)
    with _on("override_policies"), _pinned(specs):
        yield specs


@contextmanager
def _pinned(specs: tuple[PolicySpec, ...]) -> Iterator[None]:
    """The process's registry holds ``specs`` only, in the block."""
    previous = registry._registry
    registry._registry = _Pinned(specs, previous)
    try:
        yield
    finally:
        registry._registry = previous


def _today_us() -> int:
    """The start of today (UTC) in microseconds: every window up to a day starts there."""
    now = time.time_ns() // 1000
    return now - now % _DAY_US


@contextmanager
def fake_clock(start_us: int | None = None) -> Iterator[FakeClock]:
    """The shared engine on a :class:`~.clock.FakeClock` in the block: time moves only
    by ``clock.advance(seconds)``. It starts at ``start_us`` (microseconds since the
    epoch), by default at the start of today (UTC), so that no window (up to a day)
    ends between a test's requests unless the test moves the clock. Settings changed
    in the block keep the clock."""
    clock = FakeClock(_today_us() if start_us is None else start_us)
    previous = engine.active_test_clock()
    engine.use_test_clock(clock)
    try:
        with _on("fake_clock"):
            yield clock
    finally:
        engine.use_test_clock(previous)


def _stale(**kwargs: object) -> None:
    """A policy row was saved or deleted: the next request reloads the policies."""
    registry.get_registry()._refreshed_at = None


@contextmanager
def reset_ratelimits() -> Iterator[str]:
    """Counters from zero in the block, apart from any other test's, even one running at
    the same time on the same Redis: the block has a key prefix of its own
    (``KEY_PREFIX``), whose keys it deletes on exit. Only that prefix's keys: never
    ``FLUSHDB``. Policy, tier, override and blocked-network rows saved or deleted in the
    block are seen by the next request, without waiting ``POLICY_REFRESH``; the circuit
    breaker starts closed. Yields the prefix.
    """
    prefix = f"rlt-{secrets.token_hex(5)}"
    breaker.success()
    registry.get_registry()._refreshed_at = None
    for model in STAMPED_MODELS:  # policies, their tiers, overrides, blocked networks
        post_save.connect(_stale, sender=model, dispatch_uid="django_ratelimits.testing")
        post_delete.connect(_stale, sender=model, dispatch_uid="django_ratelimits.testing")
    try:
        with _on("reset_ratelimits"), _settings(KEY_PREFIX=prefix):
            try:
                yield prefix
            finally:
                _delete_keys(prefix)
    finally:
        if "reset_ratelimits" not in _active:
            for model in STAMPED_MODELS:
                post_save.disconnect(sender=model, dispatch_uid="django_ratelimits.testing")
                post_delete.disconnect(sender=model, dispatch_uid="django_ratelimits.testing")
        breaker.success()


def _delete_keys(prefix: str) -> None:
    """Delete the keys under ``prefix`` (SCAN, on every primary of a cluster)."""
    try:
        client = get_redis(get_settings())
        pattern = f"{prefix}:*"
        if isinstance(client, RedisCluster):
            keys = client.scan_iter(match=pattern, count=1000, target_nodes=RedisCluster.PRIMARIES)
        else:
            keys = client.scan_iter(match=pattern, count=1000)
        for key in keys:
            client.delete(key)
    except RedisError as exc:  # Redis down at the end of a test: the keys expire anyway
        logger.warning("could not delete the test's rate-limit keys under %r: %s", prefix, exc)
