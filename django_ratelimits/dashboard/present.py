"""From what the offenders service returns to what pages and the JSON endpoint show.

Activity charts are inline SVG drawn here, on the server: one bar per second,
all recorded hits in one colour and the denied ones over them in another
(colours come from the stylesheet, so admin's dark mode applies).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext

from django_ratelimits.engine import Identity, LimitResult
from django_ratelimits.engine.hits import (
    ANONYMOUS,
    DENIED,
    SHADOW,
    Hit,
    named_ident,
    named_identity,
)
from django_ratelimits.engine.keys import label
from django_ratelimits.engine.offenders import Offender, OffenderDetail
from django_ratelimits.engine.overrides import BLOCKED_POLICY, Override
from django_ratelimits.identity import HASHED
from django_ratelimits.offenders import Row, Users
from django_ratelimits.offenders.text import ago, duration
from django_ratelimits.policies.labels import ALGORITHM_LABELS, IDENTITY_KIND_LABELS, kind_label
from django_ratelimits.policies.parse import rates_text

UrlFor = Callable[[Identity], str]
# The users named by a digest that were found (:attr:`~.offenders.Users.ids`): by none.
NO_IDS: Mapping[str, str] = MappingProxyType({})

ACTIVITY_SECONDS = 60  # the span of the activity charts
SHOWN_BEHIND = 3  # entries of the "seen with" column before "and N more"


@dataclass(frozen=True)
class Who:
    """An identity seen with another one: ``user:42`` behind an IP, an IP behind a user."""

    who: str
    count: int
    text: str  # "alice (user 42)", "203.0.113.7", "anonymous"
    url: str | None


@dataclass(frozen=True)
class Activity:
    """Recorded hits per second over the last minute, oldest first: all of them,
    those denied, and those only a shadow-mode policy would have denied."""

    hits: tuple[int, ...]
    denied: tuple[int, ...]
    shadow: tuple[int, ...]

    @property
    def recorded(self) -> bool:
        """Whether anything was recorded: an empty chart says so in words instead."""
        return any(self.hits)

    def svg(self, css_class: str, label: str) -> SafeString:
        return activity_svg(self, css_class, label)

    def chart(self) -> str:
        """A page's chart of requests per second, or "" when nothing was recorded (the
        page says so in words)."""
        return self.svg("rl-activity", gettext("Requests per second")) if self.recorded else ""

    def json(self) -> dict[str, Any]:
        return {
            "seconds": len(self.hits),
            "hits": list(self.hits),
            "denied": list(self.denied),
            "would_deny": list(self.shadow),
        }


@dataclass(frozen=True)
class RowView:
    """One row of the offenders table."""

    row: Row
    kind: str
    name: str
    url: str | None
    behind: tuple[Who, ...]
    policies: tuple[tuple[str, str, int], ...]  # (name, shown as, denials), most first
    last_seen: datetime
    last_seen_text: str
    override_text: str
    activity: Activity

    @property
    def shown_behind(self) -> tuple[Who, ...]:
        return self.behind[:SHOWN_BEHIND]

    @property
    def more_behind(self) -> int:
        return max(0, len(self.behind) - SHOWN_BEHIND)

    @property
    def spark(self) -> SafeString:
        return self.activity.svg("rl-spark", gettext("Recorded hits per second, last minute"))

    def json(self) -> dict[str, Any]:
        offender, override = self.row.offender, self.row.override
        return {
            "ident": offender.ident,
            "label": offender.label,
            "kind": offender.kind,
            "value": offender.value,
            "name": self.name,
            "first_ms": offender.first_ms,
            "last_ms": offender.last_ms,
            "denials": offender.denials,
            "by_policy": {name: count for name, _, count in self.policies},
            "behind": [{"who": w.who, "count": w.count, "name": w.text} for w in self.behind],
            "override": None
            if override is None
            else {"state": override.state, "seconds": override.seconds},
            "recent": {
                "hits": sum(self.activity.hits),
                "denied": sum(self.activity.denied),
                "would_deny": sum(self.activity.shadow),
            },
            "detail_url": self.url,
            "stale": self.row.stale,
        }


@dataclass(frozen=True)
class HitView:
    """One entry of a metadata list as shown: the ``hit`` (what, outcome, the policies
    that counted it), when as a date and an age, and who as a link."""

    hit: Hit
    at: datetime
    ago: str
    who: Who

    @property
    def what(self) -> str:
        return self.hit.what

    @property
    def allowed(self) -> bool:
        return self.hit.allowed

    @property
    def shadow(self) -> bool:
        return self.hit.shadow

    @property
    def policies_text(self) -> str:
        """``api, orders-watch (would have denied)``: who counted it, and how."""
        marked = {
            DENIED: gettext("%(policy)s (denied)"),
            SHADOW: gettext("%(policy)s (would have denied)"),
        }
        return ", ".join(
            marked[status] % {"policy": policy_label(name)}
            if status in marked
            else policy_label(name)
            for name, status in self.hit.policies
        )


@dataclass(frozen=True)
class QuotaView:
    """One rate of one policy for the identity: what is left, when it is whole again."""

    policy: str
    rate: str
    algorithm: str
    remaining: int
    capacity: int
    full_in: str  # "" when whole now


def row_view(
    row: Row,
    now_ms: int,
    names: Mapping[str, str],
    url_for: UrlFor,
    ids: Mapping[str, str] = NO_IDS,
) -> RowView:
    offender = row.offender
    return RowView(
        row=row,
        kind=kind_label(offender.kind),
        name=display_name(row.who, names),
        url=None if row.identity is None else url_for(row.identity),
        behind=behind(row.detail(), names, url_for, ids),
        policies=denied_by(offender),
        last_seen=to_datetime(offender.last_ms),
        last_seen_text=ago(offender.last_ms, now_ms),
        override_text=override_text(row.override),
        activity=activity(row.hits, now_ms),
    )


def behind(
    detail: OffenderDetail,
    names: Mapping[str, str],
    url_for: UrlFor,
    ids: Mapping[str, str] = NO_IDS,
) -> tuple[Who, ...]:
    """The identities seen with this one, most frequent first, linked to their pages."""
    return tuple(who_view(who, count, names, url_for, ids) for who, count in detail.behind())


def who_view(
    who: str, count: int, names: Mapping[str, str], url_for: UrlFor, ids: Mapping[str, str] = NO_IDS
) -> Who:
    """``who`` of hit entries, linked to its page when it names an identity whole: not
    a username or a user's key an entry could only hold cut (:func:`~.hits.named_identity`),
    unless ``ids`` holds the id of the user it names so (:func:`~.offenders.users`)."""
    named, digest = named_identity(who)
    linkable = named.kind in IDENTITY_KIND_LABELS and bool(named.value) and who != ANONYMOUS
    if who in ids:
        url: str | None = url_for(Identity("user", ids[who]))
    else:
        url = url_for(named) if linkable and digest is None else None
    return Who(who, count, display_name(who, names), url)


def page_activity(rows: Sequence[Row], now_ms: int) -> Activity:
    """The activity of a page's rows together, counting each request once.

    A request from a user behind an IP is in both metadata lists ("user:42" in
    the IP's, "ip:..." in the user's). When both rows are on the page, each
    second takes, per pair of identities and path, the larger of the two
    lists' counts rather than their sum. (Matching entries one by one would
    fail on a cluster, where the two identities are written by separate
    script calls whose times may differ by a millisecond or more.) An entry of
    the second list is placed in the second of the first list's nearest entry
    within :data:`SAME_REQUEST_MS`, so that a request whose two calls fall either
    side of a second is not counted in both. Identities pair by the ident of their
    keys, not by how they are written: an entry names a user whose id it cannot
    hold whole by a digest (``user:////…… ~Ab3…``), the row by the id itself.
    """
    seconds = ACTIVITY_SECONDS
    lists: dict[tuple[frozenset[str], str], dict[str, list[Hit]]] = {}
    for row in rows:
        side = row.offender.ident
        for hit in row.hits:
            if 0 <= now_ms - hit.at_ms < seconds * 1000:
                key = (frozenset((side, named_ident(hit.who))), hit.what)
                lists.setdefault(key, {}).setdefault(side, []).append(hit)
    series = [[0] * seconds for _ in range(3)]
    for by_side in lists.values():
        first = sorted(hit.at_ms for hit in next(iter(by_side.values())))
        tallies: dict[int, list[list[int]]] = {}
        for n, hits in enumerate(by_side.values()):
            for hit in hits:
                at_ms = hit.at_ms if n == 0 else _nearest(first, hit.at_ms)
                tally = tallies.setdefault((now_ms - at_ms) // 1000, [[0, 0, 0], [0, 0, 0]])[n]
                tally[0] += 1
                tally[1] += hit.denied
                tally[2] += hit.shadow
        for age, (one, other) in tallies.items():
            for n, counts in enumerate(series):
                counts[seconds - 1 - age] += max(one[n], other[n])
    every, denied, shadow = series
    return Activity(tuple(every), tuple(denied), tuple(shadow))


#: How far apart a request's entries in two lists may be written (on a cluster its IP
#: and its user are two script calls, one after the other) for the activity chart to
#: count them in one second.
SAME_REQUEST_MS = 250


def _nearest(times: list[int], at_ms: int) -> int:
    """The time among ``times`` (sorted) nearest ``at_ms``, if within
    :data:`SAME_REQUEST_MS`; else ``at_ms``."""
    i = bisect.bisect_left(times, at_ms)
    near = min(times[max(i - 1, 0) : i + 1], key=lambda t: abs(t - at_ms), default=at_ms)
    return near if abs(near - at_ms) <= SAME_REQUEST_MS else at_ms


def activity(hits: Sequence[Hit], now_ms: int) -> Activity:
    detail = OffenderDetail(None, tuple(hits), None)
    every, denied, shadow = (
        tuple(detail.per_second(now_ms, ACTIVITY_SECONDS, outcome))
        for outcome in (None, DENIED, SHADOW)
    )
    return Activity(every, denied, shadow)


def activity_svg(activity: Activity, css_class: str, label: str) -> SafeString:
    """Bars in a 1-unit-per-second box that CSS stretches to any width."""
    height = 20
    peak = max(activity.hits, default=0) or 1

    def bars(counts: Sequence[int]) -> str:
        parts = []
        for second, count in enumerate(counts):
            if count:
                tall = max(0.5, round(count * height / peak, 2))
                parts.append(f"M{second} {height}v-{tall}h0.8v{tall}z")
        return "".join(parts)

    return format_html(
        '<svg class="rl-chart {}" viewBox="0 0 {} {}" preserveAspectRatio="none" role="img" '
        'aria-label="{}"><title>{}</title><path class="rl-hits" d="{}"/>'
        '<path class="rl-denied" d="{}"/><path class="rl-shadow" d="{}"/></svg>',
        css_class,
        len(activity.hits),
        height,
        label,
        gettext(
            "%(label)s: %(hits)d hits, %(denied)d denied, %(shadow)d would have been denied "
            "(shadow mode), at most %(peak)d in one second"
        )
        % {
            "label": label,
            "hits": sum(activity.hits),
            "denied": sum(activity.denied),
            "shadow": sum(activity.shadow),
            "peak": max(activity.hits, default=0),
        },
        bars(activity.hits),
        bars(activity.denied),
        bars(activity.shadow),
    )


def denied_by(offender: Offender) -> tuple[tuple[str, str, int], ...]:
    """``(policy, shown as, denials)``, most denials first."""
    ranked = sorted(offender.by_policy.items(), key=lambda item: (-item[1], item[0]))
    return tuple((name, policy_label(name), count) for name, count in ranked)


def policy_label(name: str) -> str:
    return gettext("blocked (by staff or a ban)") if name == BLOCKED_POLICY else name


def display_name(who: str, names: Mapping[str, str]) -> str:
    """What ``names`` shows for ``who``: a user as :func:`user_labels` names it, the address
    a recent hit keeps behind a hashed one (``HASH_IPS``, :func:`addresses`). Else
    ``anonymous`` for ``user:-``, ``hashed address h:ab12cd34…`` for a hashed address,
    the value for the rest."""
    if who == ANONYMOUS:
        return gettext("anonymous")
    if who in names:
        return names[who]
    kind, _, value = who.partition(":")
    if kind == "ip" and value.startswith(HASHED):
        return gettext("hashed address %(hash)s…") % {"hash": value[:10]}
    return value


def user_labels(known: Users) -> dict[str, str]:
    """How the dashboard names the ``user:<pk>`` identities ``known`` tells of:
    ``alice (user 42)`` (a user hit entries name by a digest by their id, as a label
    shows it), or ``user 42 (no longer exists)`` for one deleted since."""

    def shown(who: str) -> str:
        pk = known.ids[who] if who in known.ids else named_identity(who)[0].value
        return label(Identity("user", pk)).partition(":")[2]

    names = {
        who: gettext("%(name)s (user %(pk)s)") % {"name": name, "pk": shown(who)}
        for who, name in known.names.items()
    }
    for who in known.gone:
        names[who] = gettext("user %(pk)s (no longer exists)") % {"pk": shown(who)}
    return names


def addresses(hits: Iterable[Hit], own: str) -> dict[str, str]:
    """``{"ip:h:ab12...": "203.0.113.5"}``: the addresses that hits of the identity
    labelled ``own`` keep beside the hashes they stand for (``HASH_IPS``), newest first:
    an IP's own address, the IPs behind anyone else."""
    found: dict[str, str] = {}
    mine = own.startswith("ip:")
    for hit in hits:
        if hit.address:
            found.setdefault(own if mine else hit.who, hit.address)
    return found


def override_text(override: Override | None) -> str:
    if override is None:
        return ""
    left = {"left": duration(override.seconds), "level": override.level}
    if override.level:
        return gettext("banned (level %(level)s), %(left)s left") % left
    if override.state == "blocked":
        return gettext("blocked, %(left)s left") % left
    return gettext("allow-listed, %(left)s left") % left


def to_datetime(ms: int) -> datetime:
    """``ms`` since the epoch as a time for a page: aware, in ``TIME_ZONE``. With
    ``USE_TZ = True`` templates show it in the active time zone; with ``USE_TZ = False``
    they convert nothing, and show its wall time as the admin's other times are (in
    UTC, it was hours off beside them, with nothing to say so)."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).astimezone(timezone.get_default_timezone())


def hit_views(
    hits: Sequence[Hit],
    now_ms: int,
    names: Mapping[str, str],
    url_for: UrlFor,
    ids: Mapping[str, str] = NO_IDS,
) -> tuple[HitView, ...]:
    return tuple(
        HitView(
            hit=hit,
            at=to_datetime(hit.at_ms),
            ago=ago(hit.at_ms, now_ms),
            who=who_view(hit.who, 1, names, url_for, ids),
        )
        for hit in hits
    )


def quota_views(results: Sequence[LimitResult]) -> tuple[QuotaView, ...]:
    return tuple(
        QuotaView(
            policy=r.limit.policy,
            # A concurrency policy's "N/concurrent": remaining is its free slots.
            rate=rates_text(r.limit.algorithm, (r.limit.rate,)),
            algorithm=str(ALGORITHM_LABELS.get(r.limit.algorithm, r.limit.algorithm)),
            remaining=r.remaining,
            capacity=r.limit.capacity,
            full_in=duration(math.ceil(r.reset_after)) if r.reset_after_us > 0 else "",
        )
        for r in results
    )
