"""The users behind ``user:<pk>`` identities: their names.

Names are a nicety: a database error leaves them out rather than fail a page.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import DatabaseError


def user_names(whos: Iterable[str]) -> dict[str, str]:
    """``{"user:42": "alice"}`` for the ``user:<pk>`` identities that name a user (one query)."""
    model = get_user_model()
    pks: list[Any] = []
    for who in whos:
        kind, _, value = who.partition(":")
        if kind == "user":
            try:
                pks.append(model._meta.pk.to_python(value))
            except ValidationError:
                continue
    if not pks:
        return {}
    try:
        rows = model._default_manager.filter(pk__in=pks).values_list("pk", model.USERNAME_FIELD)
        return {f"user:{pk}": str(name) for pk, name in rows}
    except DatabaseError:
        return {}
