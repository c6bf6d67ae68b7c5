"""The users behind ``user:<pk>`` identities: their names, and which no user has any more.

Names are a nicety: a database error leaves them out rather than fail a page (and then
no user is said to be gone either).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import DatabaseError

from django_ratelimits.engine.hits import ANONYMOUS, named_identity


@dataclass(frozen=True)
class Users:
    """What one query says of some ``user:<pk>`` identities."""

    names: dict[str, str] = field(default_factory=dict)  # {"user:42": "alice"}
    # The identities whose id no user has any more (a user deleted since the limiter
    # counted it, such as a deleted spam account), as staff name them: ``user:42``.
    gone: frozenset[str] = frozenset()


def users(whos: Iterable[str]) -> Users:
    """The names of the ``user:<pk>`` identities among ``whos`` that name a user, and
    those whose id no user has (one query; nothing at all when it fails). A key shown
    cut, with its digest (a hit entry's, :func:`~django_ratelimits.engine.hits.user_behind`,
    or a label's), is neither: it is no id, and may be another user's whole one."""
    model = get_user_model()
    pks: dict[str, Any] = {}
    for who in whos:
        kind, _, value = who.partition(":")
        if kind == "user" and who != ANONYMOUS and named_identity(who)[1] is None:
            try:
                pks[who] = model._meta.pk.to_python(value)
            except ValidationError:
                continue
    if not pks:
        return Users()
    try:
        manager: Any = model._default_manager
        rows = list(
            manager.filter(pk__in=set(pks.values())).values_list("pk", model.USERNAME_FIELD)
        )
    except DatabaseError:
        return Users()
    found = {pk for pk, _ in rows}
    return Users(
        names={f"user:{pk}": str(name) for pk, name in rows},
        gone=frozenset(who for who, pk in pks.items() if pk not in found),
    )
