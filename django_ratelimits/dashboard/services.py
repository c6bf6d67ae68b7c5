"""What the dashboard reads: pages of offenders with their recent hits, and one identity.

Offender pages and details come from :class:`OffenderReader`; current quotas
from ``engine.peek``. The only read added here is the one that fills a page's
rows: the metadata lists (users behind an IP, IPs behind a user, recent
activity) and the overrides of every row, in one pipelined round trip (one per
node on a cluster, sent together). An unfiltered page costs four round trips
(TIME, the indexes, the records, the rows), however many rows it shows.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import DatabaseError

from django_ratelimits.engine import Check, Engine, Identity, LimitResult, get_engine
from django_ratelimits.engine.keys import ident
from django_ratelimits.engine.offenders import (
    SCAN_LIMIT,
    Hit,
    Offender,
    OffenderDetail,
    OffenderReader,
    Order,
)
from django_ratelimits.engine.overrides import Override
from django_ratelimits.policies import current

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

PER_PAGE = 25
# Pages reach as deep into the index as filters look (the reader reads every
# record above the page), so a deep page costs no more than a filtered one.
MAX_PAGE = SCAN_LIMIT // PER_PAGE
ROW_HITS = 100  # metadata entries read for each row of a page, newest first
ACTIVITY_SECONDS = 60


@dataclass(frozen=True)
class Filters:
    """What the offenders page asks for. ``user`` is a user identity's value (the pk)."""

    period: int = 3600
    order: Order = "last"
    kind: str | None = None
    policy: str | None = None
    network: IPNetwork | None = None
    user: str | None = None
    page: int = 1


@dataclass(frozen=True)
class Row:
    """One offender of a page with its recent hits and its override."""

    offender: Offender
    identity: Identity | None  # None when the label no longer names it (a value cut short)
    hits: tuple[Hit, ...]  # newest first, at most ROW_HITS
    override: Override | None

    def detail(self) -> OffenderDetail:
        return OffenderDetail(self.offender, self.hits, self.override)


@dataclass(frozen=True)
class OffenderList:
    rows: tuple[Row, ...]
    total: int | None  # identities denied in the period; None for a user lookup
    now_ms: int
    has_next: bool


@dataclass(frozen=True)
class IdentityReport:
    """One identity: its record and hits, and its quota under each policy that counts it."""

    identity: Identity
    detail: OffenderDetail
    quotas: tuple[LimitResult, ...]
    now_ms: int


def offender_list(filters: Filters) -> OffenderList:
    """The page of offenders ``filters`` asks for (raises ``BackendError``)."""
    engine = get_engine()
    reader = OffenderReader(engine)
    if filters.user is not None:
        return _user_lookup(reader, filters)
    offset = (filters.page - 1) * PER_PAGE
    if filters.network is not None:
        # The index knows nothing of networks: look down it as far as a policy
        # filter does, and keep the addresses inside.
        page = reader.page(
            period=filters.period,
            order=filters.order,
            limit=SCAN_LIMIT,
            kind="ip",
            policy=filters.policy,
        )
        found = [o for o in page.offenders if _inside(o, filters.network)]
        found = found[offset : offset + PER_PAGE + 1]
    else:
        page = reader.page(
            period=filters.period,
            order=filters.order,
            offset=offset,
            limit=PER_PAGE + 1,
            kind=filters.kind,
            policy=filters.policy,
        )
        found = list(page.offenders)
    rows = _rows(engine, found[:PER_PAGE], page.now_ms)
    return OffenderList(rows, page.total, page.now_ms, len(found) > PER_PAGE)


def identity_report(identity: Identity) -> IdentityReport:
    """Everything the detail page shows about ``identity`` (raises ``BackendError``)."""
    engine = get_engine()
    reader = OffenderReader(engine)
    checks = [Check(identity, spec.limits) for spec in current().counting(identity.kind)]
    quotas: tuple[LimitResult, ...] = ()
    if checks:
        decision = engine.peek(checks)  # Redis' time comes with it
        quotas, now_ms = decision.results, decision.now_us // 1000
    else:
        now_ms = reader.now_ms()
    return IdentityReport(identity, reader.detail(identity, now_ms=now_ms), quotas, now_ms)


def policy_names() -> list[str]:
    """The names of the enabled policies (and declared defaults), in their order."""
    return [spec.name for spec in current().all()]


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
    except DatabaseError:  # names are a nicety: show the ids rather than fail
        return {}


def user_value(text: str) -> str:
    """The user identity value for ``text``: the pk of the user so named, else ``text``."""
    model = get_user_model()
    pk = (
        model._default_manager.filter(**{model.USERNAME_FIELD: text})
        .values_list("pk", flat=True)
        .first()
    )
    return text if pk is None else str(pk)


def _user_lookup(reader: OffenderReader, filters: Filters) -> OffenderList:
    identity = Identity("user", filters.user or "")
    now = reader.now_ms()
    detail = reader.detail(identity, now_ms=now)
    offender = detail.offender
    keep = (
        offender is not None
        and filters.page == 1
        and filters.kind in (None, "user")
        and offender.last_ms >= now - filters.period * 1000
        and (filters.policy is None or filters.policy in offender.by_policy)
    )
    rows = (Row(offender, identity, detail.hits, detail.override),) if keep and offender else ()
    return OffenderList(rows, None, now, False)


def _inside(offender: Offender, network: IPNetwork) -> bool:
    try:
        address = ipaddress.ip_network(offender.value, strict=False)
    except ValueError:  # "unknown", or a label cut short
        return False
    return address.version == network.version and address.subnet_of(network)  # type: ignore[arg-type]


def _rows(engine: Engine, offenders: Sequence[Offender], now_ms: int) -> tuple[Row, ...]:
    """The rows of ``offenders``: their recent hits and overrides, one pipeline."""
    details = OffenderReader(engine).details(offenders, hits=ROW_HITS, now_ms=now_ms)
    return tuple(
        Row(d.offender, _identity(d.offender), d.hits, d.override) for d in details if d.offender
    )


def _identity(offender: Offender) -> Identity | None:
    identity = Identity(offender.kind, offender.value)
    return identity if ident(identity) == offender.ident else None
