"""Exceptions raised by django-ratelimits."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from django_ratelimits.limiter import Verdict

# How much of a rejected rate string an error message quotes.
_QUOTE_MAX = 80


class RateLimitsError(Exception):
    """Base class of every error this package raises on purpose."""


class RateParseError(RateLimitsError, ValueError):
    """A rate string such as ``"10/s, 120/m"`` is malformed.

    ``text`` is the whole input, ``position`` the 0-based index of the
    offending character and ``reason`` what is wrong there. The message quotes
    at most the part of the input around the position, so a 10 kB string
    makes a short log line.
    """

    def __init__(self, text: str, position: int, reason: str) -> None:
        self.text = text
        self.position = position
        self.reason = reason
        super().__init__(f"invalid rate {_quote(text, position)} at position {position}: {reason}")


def _quote(text: str, position: int) -> str:
    if len(text) <= _QUOTE_MAX:
        return repr(text)
    start = max(0, min(position - _QUOTE_MAX // 2, len(text) - _QUOTE_MAX))
    excerpt = text[start : start + _QUOTE_MAX]
    before = "..." if start > 0 else ""
    after = "..." if start + _QUOTE_MAX < len(text) else ""
    return f"{before}{excerpt!r}{after} ({len(text)} characters)"


class BackendError(RateLimitsError):
    """Redis could not answer a rate-limit call.

    Every Redis failure (connection refused, timeout, cluster errors, a script
    error) reaches callers as this one type, so they can fail open or closed.
    """


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
