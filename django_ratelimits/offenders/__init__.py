"""The offenders service: the identities limits denied, and what staff do to them.

The offender dashboard (``dashboard/``) and ``manage.py ratelimits``
(``management/``) both sit on this package and only turn what it returns
into pages or terminal output:

- ``service``: :class:`Offenders` lists, inspects, resets, blocks, allow-lists
  and lifts, over the engine's offender reader and controls;
- ``operations``: one action on one identity as a value (:class:`Operation`),
  with its permission and the sentence that reports it;
- ``users``: the names of the users behind ``user:<pk>`` identities;
- ``text``: times and durations in words (``1 min 13 s ago``, ``1h 30m``).
"""

from __future__ import annotations

from django_ratelimits.offenders.operations import DURATIONS, VIEW_PERMISSION, Action, Operation
from django_ratelimits.offenders.service import (
    IdentityReport,
    OffenderList,
    Offenders,
    Query,
    Row,
    UnknownPolicy,
    parse_identity,
    policy_names,
)
from django_ratelimits.offenders.users import user_names, user_value

__all__ = [
    "DURATIONS",
    "VIEW_PERMISSION",
    "Action",
    "IdentityReport",
    "OffenderList",
    "Offenders",
    "Operation",
    "Query",
    "Row",
    "UnknownPolicy",
    "parse_identity",
    "policy_names",
    "user_names",
    "user_value",
]
