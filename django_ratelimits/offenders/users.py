"""The users behind ``user:<pk>`` identities: their names, and which no user has any more.

Names are a nicety: a database error leaves them out rather than fail a page (and then
no user is said to be gone either).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import DatabaseError
from django.db.models import Q

from django_ratelimits.engine.hits import ANONYMOUS, CUT, named_identity, user_read


@dataclass(frozen=True)
class Users:
    """What one query says of some ``user:<pk>`` identities."""

    names: dict[str, str] = field(default_factory=dict)  # {"user:42": "alice"}
    # The identities whose id no user has any more (a user deleted since the limiter
    # counted it, such as a deleted spam account), as staff name them: ``user:42``.
    gone: frozenset[str] = frozenset()
    # The ids of the users named by a digest among them (an id hit entries hold cut, or
    # read with its digest, :func:`~django_ratelimits.engine.hits.user_read`), found.
    ids: dict[str, str] = field(default_factory=dict)


# How many users named by a digest one page looks for, and how many users it reads to
# find them (those whose id starts as the entry shows it).
DIGESTED_SOUGHT = 50
DIGESTED_READ = 500


def users(whos: Iterable[str]) -> Users:
    """The names of the ``user:<pk>`` identities among ``whos`` that name a user, and
    those whose id no user has (nothing at all when the database fails).

    Each of ``whos`` is a user as hit entries read it (:func:`~django_ratelimits.engine.
    hits.user_read`), never a row's label, which may end as a cut id does: a user named
    by a digest (an id over 150 characters once escaped, with an unprintable character,
    or ending as a cut one does) is looked for among the users whose id starts as it is
    shown, and named only by the user whose entries read exactly so; one not found is
    neither named nor gone (a second query, made only for such users)."""
    model = get_user_model()
    pks: dict[str, Any] = {}
    digested: dict[str, str] = {}
    for who in whos:
        identity, digest = named_identity(who)
        if identity.kind != "user" or who == ANONYMOUS:
            continue
        if digest is not None:
            if len(digested) < DIGESTED_SOUGHT:
                digested[who] = _certain_start(identity.value)
            continue
        try:
            pks[who] = model._meta.pk.to_python(identity.value)
        except ValidationError:
            continue
    try:
        rows = _named(model, pk__in=set(pks.values())) if pks else []
        found = _found(model, digested) if digested else {}
    except DatabaseError:
        return Users()
    known = dict(rows)
    names = {who: str(known[pk]) for who, pk in pks.items() if pk in known}
    return Users(
        names=names | {who: name for who, (_, name) in found.items()},
        gone=frozenset(who for who, pk in pks.items() if pk not in known),
        ids={who: pk for who, (pk, _) in found.items()},
    )


def _named(model: Any, *query: Q, most: int | None = None, **lookups: Any) -> list[tuple[Any, Any]]:
    manager: Any = model._default_manager
    return list(manager.filter(*query, **lookups).values_list("pk", model.USERNAME_FIELD)[:most])


def _found(model: Any, digested: dict[str, str]) -> dict[str, tuple[str, str]]:
    """``{who: (pk, name)}`` for the users named by a digest in ``digested`` (each with
    the start its id certainly has), as their entries read them."""
    if model._meta.pk.get_internal_type() not in ("CharField", "TextField", "SlugField"):
        return {}  # an entry holds every integer or UUID key whole
    starts = Q()
    for start in sorted(set(digested.values())):
        starts |= Q(pk__startswith=start)
    candidates = _named(model, starts, most=DIGESTED_READ)
    found = {}
    for pk, name in candidates:
        who = user_read(pk)
        if who in digested:
            found[who] = (str(pk), str(name))
    return found


def _certain_start(shown: str) -> str:
    """The start of an id shown by a digest (``…`` and the digest after it) that the id
    certainly has: up to the first character that may stand for another (``/`` for a
    ``|``, the replacement character for one unprintable)."""
    shown = shown[: shown.rindex(CUT)]
    return re.split("[/\ufffd]", shown, maxsplit=1)[0]
