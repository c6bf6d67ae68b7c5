"""The read side of the offender data, for the offenders service
(:mod:`django_ratelimits.offenders`); its write side is :mod:`.controls`.

Bounded reads only, never KEYS or SCAN: a page costs two pipelined round trips
(one per node on a cluster, sent together): the shard indexes (top entries of
each shard, merged), then the records of the identities on the page. An
identity's detail costs one more (records, metadata list, override); the
service adds an engine ``peek`` for its current quota. Metadata entries are
parsed by :mod:`.hits`, override markers by :mod:`.overrides`.

Denials and shadow hits (what a shadow-mode policy would have denied) are two
ledgers with the same layout (:mod:`.keys`): a page lists one of them, so an
identity only a shadow policy caught never shows among the offenders.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from redis.exceptions import RedisClusterException, RedisError

from django_ratelimits.engine import hits as hit_entries
from django_ratelimits.engine.core import Engine
from django_ratelimits.engine.errors import BackendError
from django_ratelimits.engine.hits import Hit
from django_ratelimits.engine.keys import OVERRIDE, shard_share
from django_ratelimits.engine.limits import Identity
from django_ratelimits.engine.overrides import Override, decode

Order = Literal["last", "denials"]
_ERRORS = (RedisError, RedisClusterException)
# How far down the merged index a filtered page may look.
SCAN_LIMIT = 5000
# A shard's most denied entries last denied since a time (KEYS: its count index, its
# time index; ARGV: the time in ms, how many, how far down to look): an entry older than
# the period (past the retention, it waits in both indexes for a denial to trim it) is
# passed over, so the most denied of the period fill the page. Read-only. Returns the
# entries (member, score, ...), then, if it stopped at the scan's depth with entries
# left below, the count of the last one it read (none below has more), else ''.
_MOST_DENIED_SINCE = """
local since, want, scan = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local found, start, bound, floor = {}, 0, '', ''
while #found < 2 * want do
  if start >= scan then
    if #redis.call('ZREVRANGE', KEYS[1], start, start) > 0 then
      bound = floor
    end
    break
  end
  local part = redis.call('ZREVRANGE', KEYS[1], start, start + 99, 'WITHSCORES')
  for i = 1, #part, 2 do
    local last = redis.call('ZSCORE', KEYS[2], part[i])
    if last and tonumber(last) >= since and #found < 2 * want then
      found[#found + 1], found[#found + 2] = part[i], part[i + 1]
    end
    floor = part[i + 1]
  end
  if #part < 200 then
    break
  end
  start = start + 100
end
found[#found + 1] = bound
return found
"""


@dataclass(frozen=True)
class Offender:
    """An identity that was denied, as its offender record tells it (or, read from
    the shadow ledger, that shadow policies would have denied: ``denials`` then
    counts would-be denials)."""

    ident: str  # "ip:203.0.113.7", as in keys and the index
    label: str  # for people: the raw value when the key holds a digest
    first_ms: int
    last_ms: int
    denials: int
    by_policy: dict[str, int] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return self.ident.partition(":")[0]

    @property
    def value(self) -> str:
        return self.label.partition(":")[2]


@dataclass(frozen=True)
class OffenderPage:
    offenders: tuple[Offender, ...]
    total: int  # identities denied in the period, all shards
    now_ms: int


@dataclass(frozen=True)
class OffenderDetail:
    offender: Offender | None  # None if the identity was never denied (or forgotten)
    hits: tuple[Hit, ...]  # newest first
    override: Override | None
    shadow: Offender | None = None  # its would-be denials, if shadow policies caught it

    def behind(self) -> list[tuple[str, int]]:
        """The other identities seen in the hits, most frequent first."""
        return Counter(h.who for h in self.hits).most_common()

    def per_second(self, now_ms: int, seconds: int = 60, outcome: str | None = None) -> list[int]:
        """Hits (of one ``outcome`` only, if given) per second over the last
        ``seconds``, oldest first."""
        counts = [0] * seconds
        for hit in self.hits:
            if outcome is not None and hit.outcome != outcome:
                continue
            age = (now_ms - hit.at_ms) // 1000
            if 0 <= age < seconds:
                counts[seconds - 1 - age] += 1
        return counts


class OffenderReader:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def now_ms(self) -> int:
        try:
            return self.engine.now_us() // 1000
        except _ERRORS as exc:
            raise BackendError(f"could not read Redis' time: {exc}") from exc

    def page(
        self,
        *,
        period: int = 3600,
        order: Order = "last",
        offset: int = 0,
        limit: int = 50,
        kind: str | None = None,
        policy: str | None = None,
        shadow: bool = False,
        by_time: bool = False,
    ) -> OffenderPage:
        """Identities denied in the last ``period`` seconds, newest or most denied first;
        with ``shadow``, those shadow policies would have denied instead.

        ``kind`` keeps one kind of identity (``"ip"``, ``"user"``...); ``policy``
        keeps those denied by that policy. Filtered pages look at most
        :data:`SCAN_LIMIT` entries down the index.

        Records are read for the page's rows only, except where the rows
        cannot be known without them: sorted by denials (the period is checked
        on the records) or filtered by policy. Each shard gives its top entries
        (:func:`~django_ratelimits.engine.keys.shard_share`). Sorted by denials over a
        period shorter than the records' retention, the most denied of all may
        all be older than the period: the period's entries are read by time then
        (the :data:`SCAN_LIMIT` most recent) and ranked by their records' counts. Over
        the retention or longer, each shard reads its count index down and passes over
        the entries older than the period, which wait there for a denial to trim them;
        should a shard's scan stop at :data:`SCAN_LIMIT` above entries that could rank on
        the page, the period's entries read by time (as ``by_time`` asks) are added to
        those found, and all ranked by their records' counts.
        """
        now = self.now_ms()
        since = now - period * 1000
        space = self.engine.keys
        by_count = order == "denials" and period >= self.engine.offender_retention and not by_time
        ranked_here = order == "denials" and not by_count
        scan = kind is not None or policy is not None or ranked_here
        want = SCAN_LIMIT if scan else offset + limit
        per_shard = shard_share(want, space.shards)
        pipe = self._pipeline()
        for shard in range(space.shards):
            index = space.index(shard, shadow=shadow)
            if by_count:
                counts = space.count_index(shard, shadow=shadow)
                pipe.execute_command(
                    "EVAL", _MOST_DENIED_SINCE, 2, counts, index, since, per_shard, SCAN_LIMIT,
                    **self.engine._route(index),
                )  # fmt: skip
            else:
                pipe.zrevrangebyscore(index, "+inf", since, 0, per_shard, withscores=True)
            pipe.zcount(index, since, "+inf")
        replies = self._run(pipe)
        bounds: list[float] = []  # of the shards whose scan stopped with entries below
        if by_count:  # flat [member, score, ..., bound] from the script
            bounds = [float(flat[-1]) for flat in replies[0::2] if flat[-1]]
            replies[0::2] = [
                [(flat[i], float(flat[i + 1])) for i in range(0, len(flat) - 1, 2)]
                for flat in replies[0::2]
            ]
        ranked = heapq.merge(*replies[0::2], key=lambda item: -item[1])
        total = sum(replies[1::2])
        idents = [m.decode() for m, _ in ranked]
        if kind is not None:
            idents = [i for i in idents if i.partition(":")[0] == kind]
        if order == "last" and policy is None:  # every entry is in the period: read the page only
            window = [o for o in self._records(idents[offset : offset + limit], shadow) if o]
            return OffenderPage(tuple(window), total, now)
        offenders = [o for o in self._records(idents[:want], shadow) if o and o.last_ms >= since]
        if policy is not None:
            offenders = [o for o in offenders if policy in o.by_policy]
        if ranked_here:  # most denied first; as many, the most recent first (as read)
            offenders.sort(key=lambda o: -o.denials)
        shown = offenders[offset : offset + limit]
        if bounds and (len(shown) < limit or shown[-1].denials <= max(bounds)):
            # A shard's scan stopped above entries that could rank here: add the period's
            # entries read by time to those found.
            recent = self.page(
                period=period, order=order, limit=SCAN_LIMIT, kind=kind, policy=policy,
                shadow=shadow, by_time=True,
            )  # fmt: skip
            merged = {o.ident: o for o in (*offenders, *recent.offenders)}
            offenders = sorted(merged.values(), key=lambda o: -o.denials)
            shown = offenders[offset : offset + limit]
        return OffenderPage(tuple(shown), total, now)

    def detail(self, identity: Identity, *, now_ms: int | None = None) -> OffenderDetail:
        """The records, the metadata list and the override of one identity; ``now_ms``
        (Redis' time, read here if not given) decides whether the override is in force."""
        keys = self.engine.keys.of(identity)
        now = self.now_ms() if now_ms is None else now_ms
        pipe = self._pipeline()
        pipe.hgetall(keys.record)
        pipe.lrange(keys.metadata, 0, self.engine.metadata_max_entries - 1)
        pipe.hget(keys.state, OVERRIDE)
        pipe.get(keys.override_note)
        pipe.hgetall(keys.shadow_record)
        record, entries, override, note, shadow = self._run(pipe)
        return OffenderDetail(
            _offender(keys.ident, record),
            _hits(entries),
            decode(override, now * 1000, note),
            _offender(keys.ident, shadow),
        )

    def details(
        self, offenders: Sequence[Offender], *, hits: int, now_ms: int
    ) -> list[OffenderDetail]:
        """The override and the newest ``hits`` hits (none if 0) of each offender, one pipeline."""
        if not offenders:
            return []
        pipe = self._pipeline()
        for offender in offenders:
            keys = self.engine.keys.of_ident(offender.ident)
            pipe.hget(keys.state, OVERRIDE)
            pipe.get(keys.override_note)
            if hits:
                pipe.lrange(keys.metadata, 0, hits - 1)
        replies = iter(self._run(pipe))
        return [
            OffenderDetail(  # keywords in pipeline order: override and its note, then hits
                offender=o,
                override=decode(next(replies), now_ms * 1000, next(replies)),
                hits=_hits(next(replies)) if hits else (),
            )
            for o in offenders
        ]

    def _records(self, idents: Sequence[str], shadow: bool) -> list[Offender | None]:
        if not idents:
            return []
        space = self.engine.keys
        pipe = self._pipeline()
        for ident in idents:
            keys = space.of_ident(ident)
            pipe.hgetall(keys.shadow_record if shadow else keys.record)
        return [_offender(i, r) for i, r in zip(idents, self._run(pipe), strict=True)]

    def _pipeline(self) -> Any:
        return self.engine.client.pipeline(transaction=False)

    @staticmethod
    def _run(pipe: Any) -> list[Any]:
        try:
            return list(pipe.execute())
        except _ERRORS as exc:
            raise BackendError(f"could not read the offender data: {exc}") from exc


def _offender(ident: str, record: dict[bytes, bytes]) -> Offender | None:
    if not record or b"n" not in record:
        return None
    by_policy = {k[2:].decode(): int(v) for k, v in record.items() if k.startswith(b"d:")}
    return Offender(
        ident=ident,
        label=record.get(b"id", ident.encode()).decode("utf-8", "replace"),
        first_ms=int(record.get(b"first", 0)),
        last_ms=int(record.get(b"last", 0)),
        denials=int(record[b"n"]),
        by_policy=by_policy,
    )


def _hits(entries: list[bytes]) -> tuple[Hit, ...]:
    return tuple(hit for hit in map(hit_entries.parse, entries) if hit is not None)
