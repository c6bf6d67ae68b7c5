"""The circuit breaker: what counts as Redis failing."""

from __future__ import annotations

import time

from django.test import override_settings
from redis.exceptions import ClusterDownError, ClusterError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError

from django_ratelimits.breaker import CLOSED, CircuitBreaker
from django_ratelimits.exceptions import BackendError


def _failed(cause: Exception) -> BackendError:
    """A BackendError as the engine raises it: ``from`` the redis-py error."""
    try:
        raise BackendError(f"rate-limit check failed: {cause}") from cause
    except BackendError as error:
        return error


def test_redis_failing_opens_the_breaker() -> None:
    breaker = CircuitBreaker()
    for _ in range(2):
        breaker.failure(_failed(RedisConnectionError("Connection refused")))
    assert not breaker.is_open
    breaker.failure(_failed(ClusterDownError("CLUSTERDOWN The cluster is down")))
    assert breaker.is_open  # the default BREAKER_FAILURES: 3 in a row


def test_a_slot_in_migration_leaves_the_breaker_closed() -> None:
    breaker = CircuitBreaker()
    for _ in range(10):  # redis-py out of TRYAGAIN retries, or a node's TRYAGAIN itself
        breaker.failure(_failed(ClusterError("TTL exhausted.")))
        breaker.failure(_failed(TryAgainError("Multiple keys request during rehashing")))
    assert not breaker.is_open
    # ...and does not count towards the next real failures either.
    breaker.failure(_failed(RedisConnectionError("Connection refused")))
    assert not breaker.is_open


HOUR = {"DJANGO_RATELIMITS": {"BREAKER_COOLDOWN": 3600}}


def _opened(breaker: CircuitBreaker) -> None:
    for _ in range(3):
        breaker.failure(_failed(RedisConnectionError("Connection refused")))
    assert breaker.is_open


def test_a_request_that_took_no_trial_gives_nothing_back() -> None:
    """A request that began while the breaker was closed and ended in an exception after
    others' failures opened it must leave their cooldown alone (a review: it made the
    trial due at once, and a second trial could run beside one in flight)."""
    with override_settings(**HOUR):
        breaker = CircuitBreaker()
        trial = breaker.allow()
        assert trial == CLOSED
        _opened(breaker)
        breaker.abandon(trial)
        assert not breaker.may_try()


def test_a_trial_given_back_is_due_again_once_and_only_its_own() -> None:
    with override_settings(**HOUR):
        breaker = CircuitBreaker()
        _opened(breaker)
        breaker._opened_at = time.monotonic() - 3601  # the cooldown is over
        trial = breaker.allow()
        assert trial is not None and trial != CLOSED
        assert breaker.allow() is None  # one trial at a time
        breaker.abandon(trial)
        again = breaker.allow()
        assert again is not None  # the next request makes it
        breaker.failure(_failed(RedisConnectionError("Connection refused")))  # it failed
        breaker.abandon(again)  # settled already: nothing to give back
        assert not breaker.may_try()
