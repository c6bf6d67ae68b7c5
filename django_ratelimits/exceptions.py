"""Exceptions raised by django-ratelimits."""

from __future__ import annotations


class RateLimitsError(Exception):
    """Base class of every error this package raises on purpose."""


class RateParseError(RateLimitsError, ValueError):
    """A rate string such as ``"10/s, 120/m"`` is malformed.

    ``text`` is the whole input, ``position`` the 0-based index of the
    offending character and ``reason`` what is wrong there.
    """

    def __init__(self, text: str, position: int, reason: str) -> None:
        self.text = text
        self.position = position
        self.reason = reason
        super().__init__(f"invalid rate {text!r} at position {position}: {reason}")


class BackendError(RateLimitsError):
    """Redis could not answer a rate-limit call.

    Every Redis failure (connection refused, timeout, cluster errors, a script
    error) reaches callers as this one type, so they can fail open or closed.
    """
