"""Short human texts for times and durations, shared by the pages and the actions."""

from __future__ import annotations

from django.utils.translation import gettext, pgettext_lazy

_UNITS = (
    (86_400, pgettext_lazy("duration", "%(count)d d")),
    (3600, pgettext_lazy("duration", "%(count)d h")),
    (60, pgettext_lazy("duration", "%(count)d min")),
    (1, pgettext_lazy("duration", "%(count)d s")),
)


def duration(seconds: int) -> str:
    """``45 s``, ``4 min 59 s``, ``2 h``, ``1 d 3 h``: the two largest units, zeros left out."""
    seconds = max(0, int(seconds))
    n = next(i for i, (size, _) in enumerate(_UNITS) if seconds >= size or size == 1)
    size, text = _UNITS[n]
    count, rest = divmod(seconds, size)
    parts = [str(text) % {"count": count}]
    if n + 1 < len(_UNITS):
        smaller, smaller_text = _UNITS[n + 1]
        if rest >= smaller:
            parts.append(str(smaller_text) % {"count": rest // smaller})
    return " ".join(parts)


def ago(at_ms: int, now_ms: int) -> str:
    """``12 s ago``, ``3 min ago`` (``just now`` under a second)."""
    seconds = (now_ms - at_ms) // 1000
    if seconds < 1:
        return gettext("just now")
    return gettext("%(duration)s ago") % {"duration": duration(seconds)}
