"""The override marker: one identity blocked or allow-listed until a time.

Staff write it (:class:`~django_ratelimits.engine.controls.Controls`), and so
does the check script when a policy's escalating ban blocks (``lua/ban.lua``,
with a note saying so); the check script obeys it; the offender reader shows
it. This module is the Python side of the format, the one place in Python that
writes and parses it.

The value of the override field (``keys.OVERRIDE``) of an identity's state HASH
(``keys.IdentityKeys.state``, read by the check script with the limits) is
``<mode>:<until_us>``: ``b`` (blocked) or ``a`` (allow-listed), then the end
of the override in microseconds on the engine's clock. Any other value is no
override at all. The Lua side is ``override_of`` in ``lua/check.lua``: it reads
the first character and the number after the colon, decides the whole group
by them while ``until_us`` is ahead of now, and counts a denial by a block in
the offender record under the policy name :data:`BLOCKED_POLICY`.
``tests/engine/test_engine_offenders.py`` checks that both sides read a value alike.

Beside the marker, staff's writes keep two things the check script never
reads, so that the active-blocks page can list overrides without a scan: the
shard's override index (``keys.IdentityKeys.override_index``, a ZSET of
idents scored by the end in ms, trimmed by time) and the override's note
(``keys.IdentityKeys.override_note``): who set it, when, and the identity's
label, as JSON (:class:`Note`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal, NamedTuple

BLOCKED, ALLOWED = "b", "a"
# The offender record's count of denials by a block, where a policy's name would stand.
BLOCKED_POLICY = "!blocked"
_STATES: dict[str, Literal["blocked", "allowed"]] = {BLOCKED: "blocked", ALLOWED: "allowed"}


class Override(NamedTuple):
    """An override in force: ``("blocked" | "allowed", whole seconds left)``, and
    the ``level`` of the policy's ban that set a block (0: staff set it)."""

    state: Literal["blocked", "allowed"]
    seconds: int
    level: int = 0


def marker(mode: str, until_us: int) -> str:
    """The override field's value for ``mode`` (:data:`BLOCKED` or :data:`ALLOWED`)."""
    if mode not in _STATES:
        raise ValueError(f"an override is {BLOCKED!r} or {ALLOWED!r}, not {mode!r}")
    return f"{mode}:{until_us}"


def decode(
    value: bytes | str | None, now_us: int, note: bytes | str | None = None
) -> Override | None:
    """The override an override field's ``value`` puts in force at ``now_us``, if any;
    its ``note`` (the override's note key's value) tells a ban from staff's block."""
    if value is None:
        return None
    text = value.decode("ascii", "replace") if isinstance(value, bytes) else value
    mode, colon, until = text.partition(":")
    if mode not in _STATES or not colon or not until.isdigit() or int(until) <= now_us:
        return None
    state = _STATES[mode]
    noted = Note.decode(note) if state == "blocked" else None
    level = noted.level if noted is not None and noted.banned else 0
    return Override(state, -(-(int(until) - now_us) // 1_000_000), level)


BANNED_BY = "ban"
"""A note's ``by`` when a policy's escalating ban set the block (``lua/ban.lua``)."""


@dataclass(frozen=True)
class Note:
    """Who set an override (``by``: a staff user's name, or the command's), when
    (``at_us``), and the label of the identity (its ident may be a digest).

    A block that a policy's escalating ban set (the check script writes the note
    then) says ``by`` :data:`BANNED_BY`, its ``level`` (1 for a first ban) and
    the ``policy``; staff's notes have level 0.
    """

    label: str
    by: str
    at_us: int
    level: int = 0
    policy: str = ""

    @property
    def banned(self) -> bool:
        """Whether a policy's ban set this block (not staff)."""
        return self.by == BANNED_BY and self.level > 0

    def encode(self) -> str:
        return json.dumps({"label": self.label, "by": self.by, "at": self.at_us})

    @classmethod
    def decode(cls, value: bytes | str | None) -> Note | None:
        """The note ``value`` holds; ``None`` if it holds none (missing or malformed)."""
        if value is None:
            return None
        try:
            data = json.loads(value)
            return cls(
                str(data["label"]),
                str(data["by"]),
                int(data["at"]),
                int(data.get("ban", 0)),
                str(data.get("policy", "")),
            )
        except (ValueError, TypeError, KeyError):
            return None
