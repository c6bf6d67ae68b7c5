"""The offenders service: the identities limits denied, and what staff do to them.

The offender dashboard (``dashboard/``) and ``manage.py ratelimits``
(``management/``) both sit on this package and only turn what it returns
into pages or terminal output:

- ``service``: :class:`Offenders` lists, inspects, resets, blocks, allow-lists
  and lifts, over the engine's offender reader and controls;
- ``operations``: one action on one identity as a value (:class:`Operation`),
  with its permission and the sentence that reports it;
- ``identities``: what staff name (``ip:...``, ``user:alice``) as the identity
  the limiter counts, or why no request could be counted so;
- ``users``: the names of the users behind ``user:<pk>`` identities;
- ``text``: times and durations in words (``1 min 13 s ago``, ``1h 30m``).
"""

from __future__ import annotations

from django_ratelimits.offenders.identities import RECORDED_KINDS, NoSuchIdentity, resolve
from django_ratelimits.offenders.identities import parse as parse_identity
from django_ratelimits.offenders.operations import DURATIONS, VIEW_PERMISSION, Action, Operation
from django_ratelimits.offenders.service import (
    IdentityReport,
    OffenderList,
    Offenders,
    Query,
    Row,
    UnknownPolicy,
    policy_names,
)
from django_ratelimits.offenders.users import Users, users

__all__ = [
    "DURATIONS",
    "RECORDED_KINDS",
    "VIEW_PERMISSION",
    "Action",
    "IdentityReport",
    "NoSuchIdentity",
    "OffenderList",
    "Offenders",
    "Operation",
    "Query",
    "Row",
    "UnknownPolicy",
    "Users",
    "parse_identity",
    "policy_names",
    "resolve",
    "users",
]
