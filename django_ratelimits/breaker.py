"""A circuit breaker, so a Redis outage does not add a timeout to every request.

After ``BREAKER_FAILURES`` consecutive failures the breaker opens: checks fail
open (or closed, per policy) at once, without asking Redis. After
``BREAKER_COOLDOWN`` seconds one request tries Redis again; success closes the
breaker, failure keeps it open for another cooldown.

A cluster slot being migrated is not Redis failing: the checks of that slot's
identities fail (redis-py gives up after its TRYAGAIN retries) while every
other slot answers, so those failures leave the breaker as it is.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Final

from redis.exceptions import ClusterDownError, ClusterError, TryAgainError

from django_ratelimits.conf import get_settings

logger = logging.getLogger("django_ratelimits")

CLOSED: Final = 0.0
"""What :meth:`CircuitBreaker.allow` gives when the breaker is closed: no trial taken."""


class CircuitBreaker:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failures = 0
        self._opened_at: float | None = None

    @property
    def is_open(self) -> bool:
        return self._opened_at is not None

    def may_try(self) -> bool:
        """Whether Redis may be asked: closed, or open long enough for a trial that no
        request has taken yet. Takes nothing (see :meth:`allow`)."""
        opened_at = self._opened_at
        return opened_at is None or time.monotonic() - opened_at >= get_settings().breaker_cooldown

    def allow(self) -> float | None:
        """Whether to ask Redis now: ``None`` if not; else :data:`CLOSED` when the
        breaker is closed, or the trial this call took (open long enough for one), which
        :meth:`abandon` gives back if the request ends neither in :meth:`success` nor in
        :meth:`failure`."""
        opened_at = self._opened_at
        if opened_at is None:
            return CLOSED
        now = time.monotonic()
        if now - opened_at < get_settings().breaker_cooldown:
            return None
        with self._lock:
            if self._opened_at != opened_at:
                return None  # another request took the trial
            self._opened_at = now
            return now

    def abandon(self, trial: float) -> None:
        """The request that took ``trial`` (what :meth:`allow` gave) ended without asking
        Redis (the cache of denials answered it) or in an exception of its own (a
        cancelled task): the trial is due again, so that the next request makes it
        instead of the breaker staying open for a cooldown that tried nothing. Nothing
        for a request that took no trial, or one that another has since settled."""
        if trial != CLOSED and self._opened_at == trial:
            with self._lock:
                if self._opened_at == trial:
                    self._opened_at = time.monotonic() - get_settings().breaker_cooldown

    def success(self) -> None:
        if self._failures or self._opened_at is not None:
            with self._lock:
                if self._opened_at is not None:
                    logger.warning("Redis answers again: rate limits are enforced again")
                self._failures = 0
                self._opened_at = None

    def failure(self, error: Exception) -> None:
        if _slot_in_migration(error):
            logger.warning("%s (a cluster slot is being migrated)", error)
            return
        with self._lock:
            self._failures += 1
            if self._opened_at is not None:
                self._opened_at = time.monotonic()  # the trial failed: another cooldown
            elif self._failures >= get_settings().breaker_failures:
                self._opened_at = time.monotonic()
                logger.error(
                    "Redis failed %d times in a row (%s): circuit breaker open, "
                    "policies fail open or closed without asking Redis for %.1f s",
                    self._failures,
                    error,
                    get_settings().breaker_cooldown,
                )
            else:
                logger.warning("%s", error)


def _slot_in_migration(error: Exception) -> bool:
    """``TRYAGAIN`` from a node, or redis-py out of retries on one (``TTL exhausted``)."""
    cause = error.__cause__ or error
    if isinstance(cause, TryAgainError):
        return True
    return (
        isinstance(cause, ClusterError)
        and not isinstance(cause, ClusterDownError)
        and "TTL exhausted" in str(cause)
    )


breaker = CircuitBreaker()
