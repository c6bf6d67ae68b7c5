"""The override marker: one identity blocked or allow-listed until a time.

Staff write it (:class:`~django_ratelimits.engine.controls.Controls`); the
check script obeys it; the offender reader shows it. This module is the
Python side of the format, the one place that writes and parses it.

The value of an identity's override key (``keys.IdentityKeys.override``) is
``<mode>:<until_us>``: ``b`` (blocked) or ``a`` (allow-listed), then the end
of the override in microseconds on the engine's clock. Any other value is no
override at all. The Lua side is ``override_of`` in ``lua/check.lua``: it reads
the first character and the number after the colon, decides the whole group
by them while ``until_us`` is ahead of now, and counts a denial by a block in
the offender record under the policy name :data:`BLOCKED_POLICY`.
``tests/test_engine_offenders.py`` checks that both sides read a value alike.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

BLOCKED, ALLOWED = "b", "a"
# The offender record's count of denials by a block, where a policy's name would stand.
BLOCKED_POLICY = "!blocked"
_STATES: dict[str, Literal["blocked", "allowed"]] = {BLOCKED: "blocked", ALLOWED: "allowed"}


class Override(NamedTuple):
    """An override in force: ``("blocked" | "allowed", whole seconds left)``."""

    state: Literal["blocked", "allowed"]
    seconds: int


def marker(mode: str, until_us: int) -> str:
    """The override key's value for ``mode`` (:data:`BLOCKED` or :data:`ALLOWED`)."""
    if mode not in _STATES:
        raise ValueError(f"an override is {BLOCKED!r} or {ALLOWED!r}, not {mode!r}")
    return f"{mode}:{until_us}"


def decode(value: bytes | str | None, now_us: int) -> Override | None:
    """The override an override key's ``value`` puts in force at ``now_us``, if any."""
    if value is None:
        return None
    text = value.decode("ascii", "replace") if isinstance(value, bytes) else value
    mode, colon, until = text.partition(":")
    if mode not in _STATES or not colon or not until.isdigit() or int(until) <= now_us:
        return None
    return Override(_STATES[mode], -(-(int(until) - now_us) // 1_000_000))
