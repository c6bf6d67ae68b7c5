"""Short texts for times and durations: the dashboard's, the command's, admin's.

- :func:`duration` and :func:`ago`, translated, for pages: ``1 min 13 s``, ``12 s ago``;
- :func:`words`, translated, for a sentence: ``1 minute 13 seconds``;
- :func:`span` and :func:`parse_span`, for the terminal: ``1h 30m``, and ``90s``,
  ``5m``, ``1h`` or ``7d`` read back;
- :func:`period`, translated, for a rate's period in admin: ``minute``, ``5 minutes``.
"""

from __future__ import annotations

import re

from django.utils.translation import gettext, ngettext_lazy, pgettext_lazy
from django.utils.translation import gettext_lazy as _

_SIZES = (86_400, 3600, 60, 1)  # largest first
_SYMBOLS = ("d", "h", "m", "s")
_TEXTS = (
    pgettext_lazy("duration", "%(count)d d"),
    pgettext_lazy("duration", "%(count)d h"),
    pgettext_lazy("duration", "%(count)d min"),
    pgettext_lazy("duration", "%(count)d s"),
)
_PERIODS = (
    # Translators: a rate's period alone, as in "10 requests per day".
    (_("day"), ngettext_lazy("%(count)s day", "%(count)s days", "count")),
    (_("hour"), ngettext_lazy("%(count)s hour", "%(count)s hours", "count")),
    (_("minute"), ngettext_lazy("%(count)s minute", "%(count)s minutes", "count")),
    (_("second"), ngettext_lazy("%(count)s second", "%(count)s seconds", "count")),
)
_SPAN = re.compile(r"([1-9][0-9]{0,7})([smhd])")


def _largest_two(seconds: int) -> list[tuple[int, int]]:
    """``(count, unit)`` of the largest unit in ``seconds`` and of the next one,
    a zero count of the next one left out; ``unit`` indexes :data:`_SIZES`."""
    rest, counts = max(0, seconds), []
    for size in _SIZES:
        count, rest = divmod(rest, size)
        counts.append(count)
    first = next((n for n, count in enumerate(counts) if count), len(_SIZES) - 1)
    return [
        (counts[n], n) for n in range(first, min(first + 2, len(_SIZES))) if n == first or counts[n]
    ]


def duration(seconds: float) -> str:
    """``45 s``, ``4 min 59 s``, ``2 h``, ``1 d 3 h``: the two largest units, zeros left out."""
    return " ".join(str(_TEXTS[n]) % {"count": count} for count, n in _largest_two(int(seconds)))


def words(seconds: int) -> str:
    """``1 second``, ``1 minute 13 seconds``, ``2 hours``: :func:`duration` in words, for a
    sentence such as the 429 page's. Under a second is ``1 second``."""
    return " ".join(
        str(_PERIODS[n][1] % {"count": count}) for count, n in _largest_two(max(1, seconds))
    )


def ago(at_ms: int, now_ms: int) -> str:
    """``12 s ago``, ``3 min ago`` (``just now`` under a second)."""
    seconds = (now_ms - at_ms) // 1000
    if seconds < 1:
        return gettext("just now")
    return gettext("%(duration)s ago") % {"duration": duration(seconds)}


def span(seconds: float) -> str:
    """``45s``, ``5m``, ``1h 30m``, ``2d 3h``: :func:`duration` for a terminal."""
    return " ".join(f"{count}{_SYMBOLS[n]}" for count, n in _largest_two(round(seconds)))


def parse_span(text: str) -> int:
    """``"90s"``, ``"5m"``, ``"1h"``, ``"7d"`` in seconds; ``ValueError`` for anything else."""
    match = _SPAN.fullmatch(text.strip().lower())
    if match is None:
        raise ValueError(f"{text!r} is not a number and a unit (s, m, h or d)")
    return int(match[1]) * _SIZES[_SYMBOLS.index(match[2])]


def period(seconds: int) -> str:
    """``minute``, ``5 minutes``: a rate's period in the largest unit that divides it."""
    n = next(n for n, size in enumerate(_SIZES) if seconds % size == 0)
    count = seconds // _SIZES[n]
    one, many = _PERIODS[n]
    return str(one) if count == 1 else str(many % {"count": count})
