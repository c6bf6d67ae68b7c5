"""What admin and the dashboard call each choice a policy offers, translatable.

The values themselves are model-free (:mod:`django_ratelimits.policies.spec`,
:class:`~django_ratelimits.engine.Algorithm`); the model's field choices and
the dashboard's texts are built from these tables, so each label has one home.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final, TypeVar

from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

from django_ratelimits.engine import Algorithm
from django_ratelimits.policies.spec import IDENTITY_KINDS, Counts, KeyKind, Mode, Recording

__all__ = [
    "ALGORITHM_LABELS",
    "COUNTS_LABELS",
    "IDENTITY_KIND_LABELS",
    "KEY_LABELS",
    "MODE_LABELS",
    "MODE_WORDS",
    "RECORDING_LABELS",
    "choices",
    "kind_label",
    "kinds_label",
]

_Value = TypeVar("_Value", bound=str)

ALGORITHM_LABELS: Final[Mapping[Algorithm, Promise]] = {
    Algorithm.FIXED_WINDOW: _("Fixed window"),
    Algorithm.SLIDING_WINDOW: _("Sliding window"),
    Algorithm.SLIDING_WINDOW_COUNTER: _("Sliding window counter (approximate)"),
    Algorithm.SLIDING_LOG: _("Sliding log"),
    Algorithm.TOKEN_BUCKET: _("Token bucket"),
    Algorithm.GCRA: _("GCRA (leaky bucket as a meter)"),
    Algorithm.CONCURRENCY: _("Concurrency (requests in flight at once)"),
}

MODE_LABELS: Final[Mapping[Mode, Promise]] = {
    Mode.ENFORCE: _("Enforce: deny requests over the limit"),
    Mode.SHADOW: _("Shadow: count and record, never block"),
}

# One word each, for the policy list's column (the label above is its tooltip).
MODE_WORDS: Final[Mapping[Mode, Promise]] = {
    Mode.ENFORCE: _("Enforce"),
    Mode.SHADOW: _("Shadow"),
}

RECORDING_LABELS: Final[Mapping[Recording, Promise]] = {
    Recording.NONE: _("Nothing"),
    Recording.DENIALS: _("Denials (and would-be denials in shadow mode)"),
    Recording.EVERY: _("Every hit"),
}

KEY_LABELS: Final[Mapping[KeyKind, Promise]] = {
    KeyKind.IP: _("Client IP"),
    KeyKind.USER: _("User (anonymous requests are not counted)"),
    KeyKind.USER_OR_IP: _("User, or client IP when anonymous"),
    KeyKind.IP_AND_USER: _("Client IP and user, as two identities"),
    KeyKind.HEADER: _("A request header (e.g. an API key)"),
    KeyKind.CALLABLE: _("A callable, by dotted path"),
    KeyKind.USERNAME: _("Username tried (failed logins only)"),
    KeyKind.IP_AND_USERNAME: _(
        "Client IP and username tried, as two identities (failed logins only)"
    ),
    KeyKind.IP_USERNAME_PAIR: _("The pair of client IP and username tried (failed logins only)"),
}

COUNTS_LABELS: Final[Mapping[Counts, Promise]] = {
    Counts.REQUESTS: _("Every request the policy matches"),
    Counts.FAILED_LOGINS: _("Failed logins only (and refuses logins over the limit)"),
}

# What a kind of identity is called where a person reads it; the kind itself (``ip``,
# ``user``...) is the notation staff type (``ip:203.0.113.7``), stored as it is.
IDENTITY_KIND_LABELS: Final[Mapping[str, Promise]] = {
    "ip": pgettext_lazy("identity kind", "IP"),
    "user": pgettext_lazy("identity kind", "User"),
    "header": pgettext_lazy("identity kind", "Header"),
    "key": pgettext_lazy("identity kind", "Key"),
    "username": pgettext_lazy("identity kind", "Username tried"),
    "ip_username": pgettext_lazy("identity kind", "IP and username tried"),
}


def kind_label(kind: str) -> str:
    """The label of ``kind``, in the active language (the kind itself if it has none)."""
    return str(IDENTITY_KIND_LABELS.get(kind, kind))


def kinds_label(kinds: Iterable[str]) -> str:
    """The labels of ``kinds``, comma-separated, in the order staff see the kinds."""
    wanted = set(kinds)
    ordered = [kind for kind in IDENTITY_KINDS if kind in wanted]
    return ", ".join(kind_label(kind) for kind in ordered + sorted(wanted - set(ordered)))


def choices(labels: Mapping[_Value, Promise]) -> list[tuple[str, Promise]]:
    """A model field's ``choices``: (stored value, label) in the table's order."""
    return [(str(value), label) for value, label in labels.items()]
