"""Tiers: a policy's other rates for the users of a Django group or of a plan.

A :class:`Tier` matches a signed-in user by group name (``group``) or by the
value of a plain attribute path (``attribute``, e.g. ``("profile", "plan")``
equal to ``value``). A policy's tiers are tried in order; the first that
matches gives its rates. :func:`parse_attribute_path` is the one rule for what
an attribute path may be, for admin and for :class:`Tier`: plain lowercase
names, none starting with ``_`` (so no dunder, no private attribute), at most
:data:`ATTRIBUTE_DEPTH` steps. Reading one never calls what it finds: a step
that yields a callable (a method, a manager) matches nothing, so a policy
editor can only name data. A property or a related object is the project's
own code and may query the database (``profile.plan`` costs one query per
request unless the user is loaded with its profile).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Final

from django_ratelimits.errors import Reason, ReasonError, gettext_noop
from django_ratelimits.rates import Rate

__all__ = [
    "ATTRIBUTE_DEPTH",
    "AttributePathError",
    "Tier",
    "parse_attribute_path",
    "read_attribute",
]

ATTRIBUTE_DEPTH: Final = 4
_NAME_RE = re.compile(r"[a-z][a-z0-9_]{0,63}")


class AttributePathError(ReasonError):
    """Not a plain attribute path: a ``ValueError`` saying why, in English, and as a
    :class:`~django_ratelimits.errors.Reason` (``translatable``) for admin to translate."""


def parse_attribute_path(text: str) -> tuple[str, ...]:
    """``profile.plan`` as its steps; :class:`AttributePathError` saying why if it is
    not a plain path."""
    steps = tuple(text.strip().split("."))
    if len(steps) > ATTRIBUTE_DEPTH:
        raise AttributePathError(Reason(gettext_noop("at most %(max)s names"), max=ATTRIBUTE_DEPTH))
    for step in steps:
        if not _NAME_RE.fullmatch(step):
            raise AttributePathError(
                Reason(
                    gettext_noop(
                        "%(name)s is not a plain attribute name "
                        "(lowercase letters, digits and _, not starting with _)"
                    ),
                    name=repr(step[:64]),
                )
            )
    return steps


def read_attribute(start: object, steps: tuple[str, ...]) -> object | None:
    """The value at ``steps`` below ``start``; None if a step is missing, None or callable."""
    obj = start
    for step in steps:
        try:
            obj = getattr(obj, step, None)
        except Exception:  # e.g. a property of the project's that fails: no match
            return None
        if obj is None or callable(obj):
            return None
    return obj


@dataclass(frozen=True)
class Tier:
    """Rates for the users in ``group``, or whose ``attribute`` path equals ``value``."""

    rates: tuple[Rate, ...]
    group: str = ""
    attribute: tuple[str, ...] = ()
    value: str = ""

    def __post_init__(self) -> None:
        if not self.rates:
            raise ValueError("a tier needs at least one rate")
        if bool(self.group) == bool(self.attribute):
            raise ValueError("a tier matches a group or an attribute, one of them")
        if self.attribute:
            parse_attribute_path(".".join(self.attribute))

    def matches(self, user: Any, groups: Collection[str]) -> bool:
        """Whether ``user`` (signed in), in the groups named ``groups``, is in this tier."""
        if self.group:
            return self.group in groups
        found = read_attribute(user, self.attribute)
        return found is not None and str(found) == self.value
