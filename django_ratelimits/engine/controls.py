"""What staff do to one identity's state in Redis: reset, block, allow-list, lift.

The hot path (:class:`~django_ratelimits.engine.core.Engine`'s ``check``) only
reads what these write. A write is one round trip to the node of the
identity's slot (a block or allow-listing one more first, for Redis' time);
:meth:`Controls.active` lists the overrides in force from the shards'
override indexes, never scanning keys. Any Redis failure raises
:class:`~django_ratelimits.exceptions.BackendError`.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from redis.exceptions import RedisClusterException, RedisError

from django_ratelimits.engine import overrides, script
from django_ratelimits.engine.core import Engine
from django_ratelimits.engine.errors import BackendError
from django_ratelimits.engine.keys import BAN_FIELD, HORIZON, OVERRIDE, label, shard_share
from django_ratelimits.engine.limits import Identity, Limit
from django_ratelimits.engine.overrides import Note, Override

_REDIS_ERRORS = (RedisError, RedisClusterException)
MAX_OVERRIDE = 365 * 86_400  # seconds
MIN_OVERRIDE = 0.001  # seconds
ACTIVE_MAX = 1000  # overrides :meth:`Controls.active` reads from each shard at most
# Deletes fields (ARGV[2]...: limits', or the override) from a state HASH (KEYS[1]),
# and the HASH once nothing but its TTL horizon (keys.HORIZON, ARGV[1]) is left:
# atomically, so no check's write in between is lost. ARGV[2] EVERY (no field's name:
# fields have no '*') deletes every counter the HASH holds instead: each field with a
# '|' (a limit's spec, or a ban's "!ban|<policy>"), whatever policy wrote it (one of
# the compat layer's, one since deleted); the override and the horizon stay. A HASH
# holds a field per limit of its identity's policies: few, read whole. Returns what the
# first field named held (a lift's: the override it ends, so two lifts at once cannot
# both report ending it).
EVERY = "*"
_DROP_FIELDS = """
local before = redis.call('HGET', KEYS[1], ARGV[2])
local fields = ARGV
if ARGV[2] == '*' then
  fields = {ARGV[1]}
  for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
    if string.find(field, '|', 1, true) then
      fields[#fields + 1] = field
    end
  end
end
for i = 2, #fields, 1000 do
  redis.call('HDEL', KEYS[1], unpack(fields, i, math.min(#fields, i + 999)))
end
if redis.call('HLEN', KEYS[1]) == 1 and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  redis.call('DEL', KEYS[1])
end
return before
"""


@dataclass(frozen=True)
class ActiveOverride:
    """One block or allow-listing in force: whose, until when (on the engine's clock),
    and who set it when (``note``; ``None`` if it was set before notes were kept)."""

    ident: str
    label: str
    state: Literal["blocked", "allowed"]
    seconds: int  # whole seconds left
    until_ms: int
    note: Note | None

    @property
    def kind(self) -> str:
        return self.ident.partition(":")[0]


@dataclass(frozen=True)
class ActiveOverrides:
    """The overrides in force, soonest to end first; ``total`` counts them all, even
    those past the :data:`ACTIVE_MAX` read from a shard."""

    overrides: tuple[ActiveOverride, ...]
    total: int
    now_ms: int


class Controls:
    """Staff's writes to the identities of one engine's key space."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def reset(
        self,
        identity: Identity,
        limits: Sequence[Limit] = (),
        *,
        forget: bool = False,
        every: bool = False,
    ) -> None:
        """Clear ``identity``'s state under ``limits``, their policies' bans' levels
        and denials too (a ban in force is a block: :meth:`lift` ends it). With
        ``every``, also every other counter its state HASH holds (a compat layer's
        policy, or a policy deleted since): every policy's.

        With ``forget``, also drop its metadata list and offender and shadow
        records and take it out of their indexes.
        """
        keys = self.engine.keys.of(identity)
        fields = [limit.spec for limit in limits if not limit.is_log]
        fields += sorted({BAN_FIELD + limit.policy for limit in limits if limit.ban})
        names = [keys.log(limit) for limit in limits if limit.is_log]
        if forget:
            names += [keys.metadata, keys.record, keys.shadow_record]
        try:
            pipe = self.engine.client.pipeline(transaction=False)
            route = self.engine._route(keys.record)  # every key here shares its slot
            if every:
                fields = [EVERY]
            if fields:
                pipe.execute_command("EVAL", _DROP_FIELDS, 1, keys.state, HORIZON, *fields, **route)
            if names:
                pipe.execute_command("UNLINK", *names, **route)
            if forget:
                pipe.execute_command("ZREM", keys.index, keys.ident, **route)
                pipe.execute_command("ZREM", keys.count_index, keys.ident, **route)
                pipe.execute_command("ZREM", keys.shadow_index, keys.ident, **route)
                pipe.execute_command("ZREM", keys.shadow_count_index, keys.ident, **route)
            pipe.execute()
        except _REDIS_ERRORS as exc:
            raise BackendError(f"could not reset {label(identity)}: {exc}") from exc

    def block(self, identity: Identity, seconds: float, *, by: str = "") -> None:
        """Deny every check of ``identity`` for ``seconds``, whatever its limits say;
        ``by`` names who did (the active-blocks page shows it)."""
        self._override(identity, overrides.BLOCKED, seconds, by)

    def allow(self, identity: Identity, seconds: float, *, by: str = "") -> None:
        """Admit every check of ``identity`` for ``seconds``, uncounted."""
        self._override(identity, overrides.ALLOWED, seconds, by)

    def lift(self, identity: Identity) -> Override | None:
        """End a block or allow-listing of ``identity``: the one this call ended, if one
        was in force (of two lifts at once, one ends it)."""
        keys = self.engine.keys.of(identity)
        try:
            now = self.engine.now_us()  # first: once it is ended, a lift never fails
            pipe = self.engine.client.pipeline(transaction=False)
            route = self.engine._route(keys.state)
            pipe.execute_command("GET", keys.override_note, **route)
            pipe.execute_command("EVAL", _DROP_FIELDS, 1, keys.state, HORIZON, OVERRIDE, **route)
            pipe.execute_command("UNLINK", keys.override_note, **route)
            pipe.execute_command("ZREM", keys.override_index, keys.ident, **route)
            note, value, *_ = pipe.execute()
        except _REDIS_ERRORS as exc:
            raise BackendError(f"could not lift the override of {label(identity)}: {exc}") from exc
        return overrides.decode(value, now, note)

    def active(self, offset: int = 0, limit: int | None = None) -> ActiveOverrides:
        """The blocks and allow-listings in force, soonest to end first, from the override
        indexes (two round trips after Redis' time): ``limit`` of them from ``offset``
        (a page), or with no ``limit`` every one (at most :data:`ACTIVE_MAX` per shard).
        Only the page's overrides are read."""
        engine = self.engine
        shards = engine.keys.shards
        per_shard = ACTIVE_MAX if limit is None else shard_share(offset + limit, shards)
        try:
            now_us = engine.now_us()
            now_ms = now_us // 1000
            pipe = engine.client.pipeline(transaction=False)
            for shard in range(shards):
                index = engine.keys.override_index(shard)
                pipe.zcount(index, f"({now_ms}", "+inf")
                pipe.zrangebyscore(
                    index, f"({now_ms}", "+inf", start=0, num=per_shard, withscores=True
                )
            replies = pipe.execute()
            ending = heapq.merge(*replies[1::2], key=lambda member: member[1])
            idents = [m.decode() for m, _ in ending]
            if limit is not None:
                idents = idents[offset : offset + limit]
            pipe = engine.client.pipeline(transaction=False)
            for who in idents:
                keys = engine.keys.of_ident(who)
                pipe.hget(keys.state, OVERRIDE)
                pipe.get(keys.override_note)
            values = pipe.execute()
        except _REDIS_ERRORS as exc:
            raise BackendError(f"could not list the overrides: {exc}") from exc
        found = []
        for who, value, note_value in zip(idents, values[::2], values[1::2], strict=True):
            override = overrides.decode(value, now_us, note_value)
            if override is None:  # ended or lifted since the index was read
                continue
            note = Note.decode(note_value)
            until_ms = now_ms + override.seconds * 1000
            found.append(
                ActiveOverride(
                    who,
                    note.label if note else who,
                    override.state,
                    override.seconds,
                    until_ms,
                    note,
                )
            )
        found.sort(key=lambda o: (o.seconds, o.ident))
        return ActiveOverrides(tuple(found), sum(replies[::2]), now_ms)

    def override(self, identity: Identity) -> Override | None:
        """The block or allow-listing of ``identity`` in force, or ``None``."""
        keys = self.engine.keys.of(identity)
        try:
            pipe = self.engine.client.pipeline(transaction=False)
            route = self.engine._route(keys.state)
            pipe.execute_command("HGET", keys.state, OVERRIDE, **route)
            pipe.execute_command("GET", keys.override_note, **route)
            value, note = pipe.execute()
            now = self.engine.now_us()
        except _REDIS_ERRORS as exc:
            raise BackendError(f"could not read the override of {label(identity)}: {exc}") from exc
        return overrides.decode(value, now, note)

    def _override(self, identity: Identity, mode: str, seconds: float, by: str) -> None:
        # At least a millisecond: the keys' TTLs are whole ms (a shorter one was no
        # override, or a Redis error on SET's PX 0), and at most a year.
        if not MIN_OVERRIDE <= seconds <= MAX_OVERRIDE:
            raise ValueError(f"an override lasts from 1 ms to 365 days, not {seconds} s")
        engine = self.engine
        keys = engine.keys.of(identity)
        try:
            now = engine.now_us()
            until = now + round(seconds * 1_000_000)
            note = Note(label(identity), by[:150], now).encode()
            # A test clock may stand still past the key's TTL: give the keys a minute more.
            extra_ms = 60_000 if engine.clock else 0
            marker = overrides.marker(mode, until)
            # Every key it writes shares the identity's slot: one script on one node.
            engine.client.execute_command(
                "EVAL", script.OVERRIDE, 1, keys.state, marker, until, note, now, extra_ms,
                **engine._route(keys.state),
            )  # fmt: skip
        except _REDIS_ERRORS as exc:
            raise BackendError(f"could not override {label(identity)}: {exc}") from exc
