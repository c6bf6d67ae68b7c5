"""The rate grammar: ``"10/s"``, ``"100/5m"``, ``"10/s, 120/m, 240/h"``.

A rate is ``<limit>/<multiplier?><unit>``::

    10/s        10 requests per second
    100/5m      100 requests per 5 minutes
    5/30 s      5 requests per 30 seconds (spaces are allowed between tokens)
    1000/day    long unit names work too, in any case

Units are ``s``, ``m``, ``h`` and ``d``, or ``sec``/``second``/``seconds``,
``min``/``minute``/``minutes``, ``hour``/``hours``, ``day``/``days``. A limit is
1 to 1,000,000 and a period 1 second to 30 days. Numbers are ASCII digits only.

The parser is a hand-written single-pass scanner: its time is linear in the
input, which is capped at :data:`MAX_TEXT_LENGTH` characters. Every error is a
:class:`~django_ratelimits.errors.RateParseError` carrying the 0-based
position of the offending character and what was expected there: in English,
and as a :class:`~django_ratelimits.errors.Reason` whose template (marked with
``gettext_noop``) admin translates where it shows the error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, NoReturn

from django_ratelimits.errors import RateParseError, Reason, gettext_noop

__all__ = [
    "MAX_LIMIT",
    "MAX_PERIOD",
    "MAX_TEXT_LENGTH",
    "Rate",
    "format_period",
    "parse_period",
    "parse_rate",
    "parse_rates",
]

MAX_LIMIT: Final = 1_000_000
MAX_PERIOD: Final = 30 * 86_400
MAX_TEXT_LENGTH: Final = 1000

_DIGITS: Final = frozenset("0123456789")
_LETTERS: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_SPACE: Final = " \t\r\n\f\v"  # ASCII whitespace only

_SECONDS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86_400}
_UNITS: Final = {
    **dict.fromkeys(("s", "sec", "second", "seconds"), 1),
    **dict.fromkeys(("m", "min", "minute", "minutes"), 60),
    **dict.fromkeys(("h", "hour", "hours"), 3600),
    **dict.fromkeys(("d", "day", "days"), 86_400),
}


@dataclass(frozen=True, order=True)
class Rate:
    """``limit`` requests allowed per ``period`` seconds.

    >>> Rate(100, 300)
    Rate(limit=100, period=300)
    >>> str(Rate(100, 300))
    '100/5m'
    """

    limit: int
    period: int

    def __post_init__(self) -> None:
        for name, value, high in (
            ("limit", self.limit, MAX_LIMIT),
            ("period", self.period, MAX_PERIOD),
        ):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"Rate {name} must be an int, not {type(value).__name__}")
            if not 1 <= value <= high:
                raise ValueError(f"Rate {name} must be between 1 and {high}, not {value}")

    def __str__(self) -> str:
        """The canonical form, with the largest unit that divides the period.

        >>> [str(Rate(10, 1)), str(Rate(120, 60)), str(Rate(5, 30)), str(Rate(1000, 86400))]
        ['10/s', '120/m', '5/30s', '1000/d']
        """
        multiplier, unit = _in_largest_unit(self.period)
        return f"{self.limit}/{'' if multiplier == 1 else multiplier}{unit}"

    @property
    def window_us(self) -> int:
        """The period in microseconds.

        >>> Rate(10, 2).window_us
        2000000
        """
        return self.period * 1_000_000


def format_period(seconds: int) -> str:
    """A period in the largest unit that divides it, as :func:`parse_period` reads it.

    >>> [format_period(1), format_period(90), format_period(7200), format_period(86400)]
    ['1s', '90s', '2h', '1d']
    """
    multiplier, unit = _in_largest_unit(seconds)
    return f"{multiplier}{unit}"


def _in_largest_unit(seconds: int) -> tuple[int, str]:
    for unit in "dhm":
        multiplier, rest = divmod(seconds, _SECONDS[unit])
        if rest == 0:
            return multiplier, unit
    return seconds, "s"


def parse_period(text: str) -> int:
    """A period alone, as a rate writes it after ``/`` (``"10m"``, ``"2 hours"``,
    ``"d"``), in seconds: 1 second to 30 days.

    >>> parse_period("10m")
    600
    """
    scanner = _Scanner(text, Reason(gettext_noop("empty input (expected a period such as '10m')")))
    scanner.skip_space()
    seconds = scanner.period()
    if scanner.peek() != "":
        scanner.fail(
            Reason(
                gettext_noop("expected the end of the input after the period, found %(found)s"),
                found=scanner.found(),
            )
        )
    return seconds


def parse_rate(text: str) -> Rate:
    """Parse exactly one rate.

    >>> parse_rate("100/5m")
    Rate(limit=100, period=300)
    >>> parse_rate("10/s, 20/m")
    Traceback (most recent call last):
    ...
    django_ratelimits.errors.RateParseError: invalid rate '10/s, 20/m' at position 4: \
expected exactly one rate, found ','
    """
    scanner = _Scanner(text)
    rate, _, _ = scanner.rate()
    if scanner.peek() == ",":
        scanner.fail(Reason(gettext_noop("expected exactly one rate, found ','")))
    return rate


def parse_rates(text: str) -> tuple[Rate, ...]:
    """Parse one or more comma-separated rates, each period at most once.

    >>> parse_rates("10/s, 120/m, 240/h")
    (Rate(limit=10, period=1), Rate(limit=120, period=60), Rate(limit=240, period=3600))
    >>> parse_rates("10/m, 20/60s")
    Traceback (most recent call last):
    ...
    django_ratelimits.errors.RateParseError: invalid rate '10/m, 20/60s' at position 9: \
period '60s' repeats the period of '10/m' (each period may appear once)
    """
    scanner = _Scanner(text)
    rates: dict[int, Rate] = {}
    while True:
        rate, written, position = scanner.rate()
        if rate.period in rates:
            scanner.fail(
                Reason(
                    gettext_noop(
                        "period %(period)s repeats the period of %(rate)s"
                        " (each period may appear once)"
                    ),
                    period=repr(written),
                    rate=f"'{rates[rate.period]}'",
                ),
                position,
            )
        rates[rate.period] = rate
        if scanner.peek() != ",":
            return tuple(rates.values())
        scanner.pos += 1


class _Scanner:
    """A cursor over the input; ``fail`` raises at the cursor or at a given position."""

    def __init__(self, text: str, empty: Reason | None = None) -> None:
        if not isinstance(text, str):
            raise TypeError(f"a rate must be a str, not {type(text).__name__}")
        self.text = text
        self.pos = 0
        if len(text) > MAX_TEXT_LENGTH:
            too_long = gettext_noop("input is longer than %(max)s characters")
            self.fail(Reason(too_long, max=MAX_TEXT_LENGTH), MAX_TEXT_LENGTH)
        if not text.strip(_SPACE):
            self.fail(
                empty or Reason(gettext_noop("empty input (expected a rate such as '10/s')")), 0
            )

    def fail(self, reason: Reason, position: int | None = None) -> NoReturn:
        raise RateParseError(self.text, self.pos if position is None else position, reason)

    def skip_space(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in _SPACE:
            self.pos += 1

    def peek(self) -> str:
        """The next character after whitespace, or "" at the end of the input."""
        self.skip_space()
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def found(self) -> str | Reason:
        """What comes next, for a reason's "found %(found)s"."""
        char = self.peek()
        return repr(char) if char else Reason(gettext_noop("the end of the input"))

    def take(self, chars: frozenset[str]) -> str:
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos] in chars:
            self.pos += 1
        return self.text[start : self.pos]

    def number(self, not_ascii: str, not_whole: str) -> tuple[int, int] | None:
        """An ASCII integer and its position, or None when no digit comes next.
        ``not_ascii`` and ``not_whole`` are the reasons when it is not (``%(found)s``)."""
        char = self.peek()
        start = self.pos
        if char.isdigit() and char not in _DIGITS:
            self.fail(Reason(not_ascii, found=repr(char)))
        digits = self.take(_DIGITS)
        if not digits:
            return None
        following = self.text[self.pos : self.pos + 1]
        if following == "." or (following.isdigit() and following not in _DIGITS):
            self.fail(Reason(not_whole, found=repr(following)))
        return int(digits), start

    def rate(self) -> tuple[Rate, str, int]:
        """Scan one rate; return it with its period as written and where that starts."""
        if self.peek() in ("", ","):
            self.fail(Reason(gettext_noop("empty rate (expected a rate such as '10/s')")))
        limit = self.number(
            gettext_noop("limit must use the ASCII digits 0-9, found %(found)s"),
            gettext_noop("limit must be a whole number of ASCII digits, found %(found)s"),
        )
        if limit is None:
            if self.peek() in ("-", "+"):
                expected = gettext_noop("expected a positive integer limit, found %(found)s")
            else:
                expected = gettext_noop("expected an integer limit, found %(found)s")
            self.fail(Reason(expected, found=self.found()))
        value, position = limit
        if not 1 <= value <= MAX_LIMIT:
            out_of_range = gettext_noop("limit must be between 1 and %(max)s, found %(value)s")
            self.fail(Reason(out_of_range, max=MAX_LIMIT, value=value), position)
        if self.peek() != "/":
            self.fail(
                Reason(
                    gettext_noop("expected '/' after the limit, found %(found)s"),
                    found=self.found(),
                )
            )
        self.pos += 1
        self.skip_space()
        start = self.pos
        period = self.period()
        written = self.text[start : self.pos]
        if self.peek() not in ("", ","):
            self.fail(
                Reason(
                    gettext_noop(
                        "expected ',' or the end of the input after the rate, found %(found)s"
                    ),
                    found=self.found(),
                )
            )
        return Rate(value, period), written, start

    def period(self) -> int:
        """Scan ``<multiplier?><unit>`` and return its length in seconds."""
        start = self.pos
        multiplier = self.number(
            gettext_noop("period multiplier must use the ASCII digits 0-9, found %(found)s"),
            gettext_noop(
                "period multiplier must be a whole number of ASCII digits, found %(found)s"
            ),
        )
        if multiplier is not None and multiplier[0] == 0:
            self.fail(Reason(gettext_noop("period multiplier must be at least 1, found 0")), start)
        self.skip_space()
        unit_start = self.pos
        word = self.take(_LETTERS)
        if not word:
            no_unit = gettext_noop("expected a unit (s, m, h or d), found %(found)s")
            self.fail(Reason(no_unit, found=self.found()), unit_start)
        if word.lower() not in _UNITS:
            unknown = gettext_noop("unknown unit %(unit)s (expected s, m, h or d)")
            self.fail(Reason(unknown, unit=repr(word)), unit_start)
        seconds = (1 if multiplier is None else multiplier[0]) * _UNITS[word.lower()]
        if seconds > MAX_PERIOD:
            too_long = gettext_noop(
                "period of %(seconds)s seconds is longer than 30 days (%(max)s)"
            )
            self.fail(Reason(too_long, seconds=seconds, max=MAX_PERIOD), start)
        return seconds
