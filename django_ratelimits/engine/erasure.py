"""Forgetting one identity: every key of it, and the hit entries of others that name it.

The write side of the right to erasure (``manage.py ratelimits forget``, the
dashboard's Forget button; ``docs/privacy.md``). :meth:`Eraser.forget` reads the
identity's metadata list (one round trip), then in one pipeline (one round trip
per node on a cluster, sent together):

- unlinks the identity's keys (:mod:`.keys`): its state HASH, the sliding logs
  of the ``limits`` given, its metadata list, offender and shadow records, its
  override's note, and, for a client IP, its identity budgets under the
  ``budgets`` given; and takes it out of its shard's offender, shadow and
  override indexes (the same slot: one shard tag);
- in the metadata list of every identity its hits name (the users behind an IP,
  the IPs behind anyone else), drops the entries naming it, in one script per
  list, and takes it out of those IPs' identity budgets.

What it cannot find stays until its TTL: entries naming it in lists its own
(capped) list no longer names, sliding logs and budgets of rates no longer in
any policy. ``docs/privacy.md`` says how long.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from redis.exceptions import RedisClusterException, RedisError

from django_ratelimits.engine import hits as hit_entries
from django_ratelimits.engine.core import Engine
from django_ratelimits.engine.errors import BackendError
from django_ratelimits.engine.keys import IdentityKeys, label
from django_ratelimits.engine.limits import Identity, Limit
from django_ratelimits.rates import Rate

_REDIS_ERRORS = (RedisError, RedisClusterException)
# Drops from the metadata list KEYS[1] every entry whose who (after an "@<address>|"
# prefix, engine/hits.py) is ARGV[1] ("<kind>:<value>"); keeps the others in order and
# the list's TTL. Answers how many it dropped. Lists are capped (METADATA_MAX_ENTRIES).
_DROP_ENTRIES = """
local entries = redis.call('LRANGE', KEYS[1], 0, -1)
local head, kept = ARGV[1] .. '|', {}
for _, entry in ipairs(entries) do
  local body = entry
  if string.sub(entry, 1, 1) == '@' then
    local bar = string.find(entry, '|', 1, true)
    body = bar and string.sub(entry, bar + 1) or ''
  end
  if string.sub(body, 1, #head) ~= head then
    kept[#kept + 1] = entry
  end
end
local dropped = #entries - #kept
if dropped > 0 then
  local ttl = redis.call('PTTL', KEYS[1])
  redis.call('DEL', KEYS[1])
  for i = 1, #kept, 1000 do
    redis.call('RPUSH', KEYS[1], unpack(kept, i, math.min(i + 999, #kept)))
  end
  if #kept > 0 and ttl > 0 then
    redis.call('PEXPIRE', KEYS[1], ttl)
  end
end
return dropped
"""


@dataclass(frozen=True)
class Erased:
    """What :meth:`Eraser.forget` did: the keys it unlinked (those that existed), and
    the identities whose metadata lists named it, with the entries dropped there."""

    keys: int
    others: tuple[Identity, ...]
    entries: int


class Eraser:
    """Forgets identities of one engine's key space."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def forget(
        self,
        identity: Identity,
        limits: Sequence[Limit] = (),
        budgets: Sequence[Rate] = (),
        gated: Sequence[str] = (),
    ) -> Erased:
        """Erase what Redis holds of ``identity`` (see the module's doc). ``limits``:
        the limits whose sliding logs it may have; ``budgets``: the identity budgets in
        force; ``gated``: the kinds of identity they gate (the request side's rule,
        policies/spec.py). Raises :class:`BackendError` when Redis fails."""
        engine = self.engine
        keys = engine.keys.of(identity)
        try:
            entries = cast(list[bytes], engine.client.lrange(keys.metadata, 0, -1))
            others = _others(entries)
            pipe = engine.client.pipeline(transaction=False)
            route = engine._route(keys.state)  # every key of the identity shares its slot
            own = _own_keys(keys, identity, limits, budgets, gated)
            pipe.execute_command("UNLINK", *own, **route)
            for index in (
                keys.index,
                keys.count_index,
                keys.shadow_index,
                keys.shadow_count_index,
                keys.override_index,
            ):
                pipe.execute_command("ZREM", index, keys.ident, **route)
            who = hit_entries.behind(identity)
            gates = budgets if identity.kind in gated else ()
            for other, ident in others:
                theirs = engine.keys.of(other) if ident is None else engine.keys.of_ident(ident)
                there = engine._route(theirs.state)
                pipe.execute_command("EVAL", _DROP_ENTRIES, 1, theirs.metadata, who, **there)
                for budget in gates if other.kind == "ip" else ():
                    gate = theirs.gate(identity.kind, budget)
                    pipe.execute_command("ZREM", gate, keys.member, **there)
            replies = pipe.execute()
        except _REDIS_ERRORS as exc:
            raise BackendError(f"could not forget {label(identity)}: {exc}") from exc
        dropped, at = 0, 6  # after the UNLINK and the five ZREM
        for other, _ in others:
            dropped += int(replies[at])
            at += 1 + (len(gates) if other.kind == "ip" else 0)
        return Erased(int(replies[0]), tuple(other for other, _ in others), dropped)


def _own_keys(
    keys: IdentityKeys,
    identity: Identity,
    limits: Sequence[Limit],
    budgets: Sequence[Rate],
    gated: Sequence[str],
) -> list[str]:
    names = [
        keys.state,
        keys.metadata,
        keys.record,
        keys.shadow_record,
        keys.override_note,
        keys.attempts,
        *(keys.log(limit) for limit in limits if limit.is_log),
    ]
    if identity.kind == "ip":
        names += [keys.gate(kind, budget) for kind in gated for budget in budgets]
    return names


def _others(entries: Sequence[bytes]) -> tuple[tuple[Identity, str | None], ...]:
    """The identities the hit ``entries`` name (anonymous users name no one), each with
    the ident of its keys when the entry names it by a digest (a username cut,
    :func:`~django_ratelimits.engine.hits.named_identity`)."""
    found: dict[tuple[Identity, str | None], None] = {}
    for hit in map(hit_entries.parse, entries):
        if hit is None or hit.who == hit_entries.ANONYMOUS:
            continue
        other = hit_entries.named_identity(hit.who)
        if other[0].value:
            found[other] = None
    return tuple(found)
