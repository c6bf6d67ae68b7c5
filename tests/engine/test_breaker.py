"""The circuit breaker: what counts as Redis failing."""

from __future__ import annotations

from redis.exceptions import ClusterDownError, ClusterError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError

from django_ratelimits.breaker import CircuitBreaker
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
