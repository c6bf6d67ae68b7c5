"""The errors of the bottom layer: the package's base error and the rate grammar's.

Each layer raises its own errors from its own module: the engine's
:class:`~django_ratelimits.engine.errors.BackendError`, the decide layer's
:class:`~django_ratelimits.decide.RateLimited`. Users import them all from
:mod:`django_ratelimits.exceptions`.
"""

from __future__ import annotations

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
