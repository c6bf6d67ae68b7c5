"""What staff can do to an identity: reset its counters, block, allow-list, lift.

An :class:`Operation` says what is to be done; :func:`perform` does it through
the engine and :func:`log` writes it to admin's history (a ``LogEntry``
against the policy model, with no object, so "Recent actions" shows the
identity as plain text).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.utils import translation
from django.utils.translation import gettext, pgettext_lazy
from django.utils.translation import gettext_lazy as _

from django_ratelimits.dashboard.text import duration
from django_ratelimits.engine import Identity, Limit, get_engine
from django_ratelimits.engine.controls import Controls
from django_ratelimits.engine.keys import label as identity_label
from django_ratelimits.models import Policy
from django_ratelimits.policies import current

VIEW_PERMISSION = "django_ratelimits.view_offenders"

DURATIONS = {
    300: _("5 minutes"),
    3600: _("1 hour"),
    86_400: _("24 hours"),
}


class Action(StrEnum):
    RESET = "reset"
    BLOCK = "block"
    ALLOW = "allow"
    LIFT = "lift"

    @property
    def permission(self) -> str:
        if self is Action.RESET:
            return "django_ratelimits.reset_offenders"
        return "django_ratelimits.block_offenders"

    @property
    def label(self) -> str:
        return str(_LABELS[self])


_LABELS = {
    Action.RESET: pgettext_lazy("action", "Reset counters"),
    Action.BLOCK: pgettext_lazy("action", "Block"),
    Action.ALLOW: pgettext_lazy("action", "Allow-list"),
    Action.LIFT: pgettext_lazy("action", "Lift the block or allow-listing"),
}


@dataclass(frozen=True)
class Operation:
    """One action on one identity.

    ``policy`` (reset only) is one policy's name, or ``None`` for every policy;
    ``forget`` (reset only) also drops the offender record, the metadata list and
    the index entries, so the identity leaves the offenders page; ``seconds``
    (block and allow only) is how long the override lasts.
    """

    action: Action
    identity: Identity
    policy: str | None = None
    forget: bool = False
    seconds: int | None = None

    @property
    def who(self) -> str:
        return identity_label(self.identity)

    def describe(self) -> str:
        """What was done, in the active language, e.g. for a message or the history."""
        values = {"who": self.who, "policy": self.policy, "duration": self._duration()}
        if self.action is Action.RESET:
            if self.policy is None:
                text = (
                    gettext(
                        "Reset rate-limit counters of %(who)s (all policies) "
                        "and forgot its offender record"
                    )
                    if self.forget
                    else gettext("Reset rate-limit counters of %(who)s (all policies)")
                )
            else:
                text = (
                    gettext(
                        "Reset rate-limit counters of %(who)s (policy %(policy)s) "
                        "and forgot its offender record"
                    )
                    if self.forget
                    else gettext("Reset rate-limit counters of %(who)s (policy %(policy)s)")
                )
        elif self.action is Action.BLOCK:
            text = gettext("Blocked %(who)s for %(duration)s")
        elif self.action is Action.ALLOW:
            text = gettext("Allow-listed %(who)s for %(duration)s")
        else:
            text = gettext("Lifted the block or allow-listing of %(who)s")
        return text % values

    def _duration(self) -> str:
        if self.seconds in DURATIONS:
            return str(DURATIONS[self.seconds])
        return duration(self.seconds or 0)


def perform(operation: Operation) -> None:
    """Do ``operation`` (raises ``BackendError`` when Redis fails)."""
    engine = Controls(get_engine())
    identity = operation.identity
    if operation.action is Action.RESET:
        engine.reset(identity, _limits(operation.policy), forget=operation.forget)
    elif operation.action is Action.BLOCK:
        engine.block(identity, operation.seconds or 0)
    elif operation.action is Action.ALLOW:
        engine.allow(identity, operation.seconds or 0)
    else:
        engine.lift(identity)


def log(user_id: int, operation: Operation) -> LogEntry:
    """Record ``operation`` in admin's history, untranslated as admin stores it."""
    with translation.override(None):
        message = operation.describe()
    return LogEntry.objects.create(
        user_id=user_id,
        content_type=ContentType.objects.get_for_model(Policy),
        object_id=None,
        object_repr=operation.who[:200],
        action_flag=CHANGE,
        change_message=message,
    )


def _limits(policy: str | None) -> list[Limit]:
    """The limits of ``policy``, or of every enabled policy."""
    specs = current().all()
    return [limit for spec in specs if policy in (None, spec.name) for limit in spec.limits]
