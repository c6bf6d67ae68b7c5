"""What staff can do to an identity, as a value: reset, block, allow-list, lift, forget.

An :class:`Operation` is one action on one identity, with the permission it
needs and the sentence that says it was done (for a message or admin's
history). :meth:`Offenders.perform <django_ratelimits.offenders.service.Offenders.perform>`
does it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from django.utils.translation import gettext, pgettext_lazy
from django.utils.translation import gettext_lazy as _

from django_ratelimits.engine import Identity
from django_ratelimits.engine.keys import label as identity_label
from django_ratelimits.offenders.text import duration
from django_ratelimits.way_back import LIFT_PERMISSION
from django_ratelimits.way_back import VIEW_PERMISSION as VIEW_PERMISSION  # re-exported

RESET_PERMISSION = "django_ratelimits.reset_offenders"

# How long a block or allow-listing can last, as staff choose it on the dashboard.
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
    FORGET = "forget"

    @property
    def permissions(self) -> tuple[str, ...]:
        """What staff need for it (besides :data:`VIEW_PERMISSION`). Forget erases the
        identity's state, its block or allow-listing with it: it needs what a lift
        needs too, or the reset permission alone would end a block."""
        if self is Action.RESET:
            return (RESET_PERMISSION,)
        if self is Action.FORGET:
            return (RESET_PERMISSION, LIFT_PERMISSION)
        return (LIFT_PERMISSION,)  # blocks, allow-lists and lifts

    @property
    def label(self) -> str:
        return str(_LABELS[self])


_LABELS = {
    Action.RESET: pgettext_lazy("action", "Reset counters"),
    Action.BLOCK: pgettext_lazy("action", "Block"),
    Action.ALLOW: pgettext_lazy("action", "Allow-list"),
    Action.LIFT: pgettext_lazy("action", "Lift the block or allow-listing"),
    Action.FORGET: pgettext_lazy("action", "Forget everything about it"),
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
        elif self.action is Action.FORGET:
            text = gettext("Forgot %(who)s")
        else:
            text = gettext("Lifted the block or allow-listing of %(who)s")
        return text % values

    def _duration(self) -> str:
        if self.seconds in DURATIONS:
            return str(DURATIONS[self.seconds])
        return duration(self.seconds or 0)
