"""The hit entry: one request in an identity's metadata list.

This module is the Python side of the format, the one place that writes and
parses it. An entry reads ``<who>|<what>|<ms>|<A or D>``:

- ``who`` is the other identity behind the request: ``user:<pk>`` (``user:-``
  when anonymous) in an IP's list, ``ip:<address>`` in anyone else's;
- ``what`` is ``<method> <path>`` and may itself hold ``|``;
- ``ms`` is the check's time in milliseconds, ``A`` allowed or ``D`` denied.

The limiter writes the head, ``<who>|<what>`` (:func:`entry_head`), and passes it
with the identity's check; the engine cuts it to 300 printable characters;
the check script (``lua/check.lua``, where it calls ``push_metadata``)
appends ``|<ms>|<A or D>`` and pushes the entry. The offender reader parses
entries with :func:`parse`. ``tests/test_engine_offenders.py`` checks that
what the script stores parses back to what was sent.
"""

from __future__ import annotations

from dataclasses import dataclass

ANONYMOUS = "user:-"


@dataclass(frozen=True)
class Hit:
    """One entry of a metadata list: who (the other identity), what, when, outcome."""

    who: str  # "user:42" behind an IP, "ip:203.0.113.7" behind anything else
    what: str  # "POST /login"
    at_ms: int
    allowed: bool


def user_behind(pk: object | None) -> str:
    """``user:<pk>`` for a signed-in user's primary key, :data:`ANONYMOUS` for ``None``."""
    return ANONYMOUS if pk is None else f"user:{str(pk).replace('|', '/')}"


def ip_behind(address: str) -> str:
    """``ip:<address>`` for the client address behind a request."""
    return f"ip:{address.replace('|', '/')}"


def entry_head(who: str, method: str | None, path: str) -> str:
    """``<who>|<method> <path>``: what the limiter hands the engine for one request."""
    return f"{who}|{method} {path}"


def parse(entry: bytes) -> Hit | None:
    """The hit ``entry`` records, or ``None`` if it is not a whole entry."""
    text = entry.decode("utf-8", "replace")
    who, _, rest = text.partition("|")
    what, _, outcome = rest.rpartition("|")
    what, _, at = what.rpartition("|")
    if not at.isdigit() or outcome not in ("A", "D"):
        return None
    return Hit(who, what, int(at), outcome == "A")
