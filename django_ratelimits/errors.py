"""The errors of the bottom layer: the package's base error and the rate grammar's,
and :class:`Reason`, the text of an error that a person may read in their language.

Each layer raises its own errors from its own module: the engine's
:class:`~django_ratelimits.engine.errors.BackendError`, the decide layer's
:class:`~django_ratelimits.decide.RateLimited`. Users import them all from
:mod:`django_ratelimits.exceptions`.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["RateLimitsError", "RateParseError", "Reason", "ReasonError", "gettext_noop"]


def gettext_noop(message: str) -> str:
    """``message`` as it is: marks it for ``makemessages`` (which finds the name), as
    Django's ``gettext_noop`` does, without Django's, which reads ``settings.USE_I18N``
    on every call: rates are parsed where no settings are configured (the engine on its
    own, ``benchmarks.instructions``)."""
    return message


# How much of a rejected rate string an error message quotes.
_QUOTE_MAX = 80


class Reason:
    """An error's text as a template and the values it names.

    ``str()`` is the English text, the same in logs, system checks and the management
    command whatever the language. :meth:`translate` is the text in the language of
    whoever reads it, with the ``gettext`` of the layer that shows it (admin's forms
    call it lazily, at display time): this module holds no translation state. The
    templates are marked with ``gettext_noop`` so that ``makemessages`` extracts them.
    A value that is itself a :class:`Reason` is translated with its template; the
    others (what was typed, numbers) are shown as they are.

    >>> str(Reason("limit must be between 1 and %(max)s, found %(value)s", max=5, value=9))
    'limit must be between 1 and 5, found 9'
    """

    __slots__ = ("params", "template")

    def __init__(self, template: str, /, **params: object) -> None:
        self.template = template
        self.params = params

    def __str__(self) -> str:
        return self.template % self.params if self.params else self.template

    def __repr__(self) -> str:
        return f"Reason({str(self)!r})"

    def translate(self, gettext: Callable[[str], str]) -> str:
        """The text through ``gettext``: the template's translation, its values filled in."""
        template = gettext(self.template)
        if not self.params:
            return template
        return template % {
            name: value.translate(gettext) if isinstance(value, Reason) else value
            for name, value in self.params.items()
        }


class RateLimitsError(Exception):
    """Base class of every error this package raises on purpose."""


class ReasonError(ValueError):
    """A ``ValueError`` whose message is a :class:`Reason`: ``str()`` is its English
    text, ``translatable`` the same text for a page to translate."""

    def __init__(self, reason: Reason) -> None:
        self.translatable = reason
        super().__init__(str(reason))


class RateParseError(RateLimitsError, ValueError):
    """A rate string such as ``"10/s, 120/m"`` is malformed.

    ``text`` is the whole input, ``position`` the 0-based index of the
    offending character and ``reason`` what is wrong there (English text;
    ``why`` is the same as a :class:`Reason`). The message quotes at most the
    part of the input around the position, so a 10 kB string makes a short log
    line; ``translatable`` is the message as a :class:`Reason`.
    """

    def __init__(self, text: str, position: int, reason: str | Reason) -> None:
        self.text = text
        self.position = position
        self.why = reason if isinstance(reason, Reason) else Reason("%(reason)s", reason=reason)
        self.reason = str(reason)
        self.translatable = Reason(
            gettext_noop("invalid rate %(text)s at position %(position)s: %(reason)s"),
            text=_quote(text, position),
            position=position,
            reason=self.why,
        )
        super().__init__(str(self.translatable))


def _quote(text: str, position: int) -> str | Reason:
    if len(text) <= _QUOTE_MAX:
        return repr(text)
    start = max(0, min(position - _QUOTE_MAX // 2, len(text) - _QUOTE_MAX))
    excerpt = text[start : start + _QUOTE_MAX]
    before = "..." if start > 0 else ""
    after = "..." if start + _QUOTE_MAX < len(text) else ""
    return Reason(
        gettext_noop("%(excerpt)s (%(length)s characters)"),
        excerpt=f"{before}{excerpt!r}{after}",
        length=len(text),
    )
