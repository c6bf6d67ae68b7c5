"""The one error the engine raises: Redis could not answer."""

from __future__ import annotations

from django_ratelimits.errors import RateLimitsError

__all__ = ["BackendError"]


class BackendError(RateLimitsError):
    """Redis could not answer a rate-limit call.

    Every Redis failure (connection refused, timeout, cluster errors, a script
    error) reaches callers as this one type, so they can fail open or closed.
    """
