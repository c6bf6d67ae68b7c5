"""The Redis side of the workers' cache of denials (:mod:`django_ratelimits.deny_cache`).

Two operations, apart from the check script:

* the **epoch** (``P:deny-epoch``): a number staff's writes to an identity (reset,
  block, allow-list, lift) increase; a worker that reads another number than it
  read before drops every denial it cached. Reading it first sets it to a
  random number if it is missing, so a Redis that lost its data (a restart, a
  ``FLUSHALL``) reads as a new epoch too.
* **recording a batch** of denials the workers answered themselves into the
  offender records and indexes, as the check script would have one by one: the
  count, the count per policy, the time of the last denial (the latest refusal's, as
  the worker knows Redis' time; never moved back), and the hit entries
  (who was behind each request; the newest ``metadata_max_entries``). A batch is added to
  a record only if the record still holds the denials the cached answer came
  from (its first denial is not after that answer): a record that staff
  forgot, or that was forgotten and started again since, does not receive
  denials from before. Nothing is created, and the offender index only
  updated for identities still in it (``ZADD XX``), so a batch never grows
  Redis' memory.
"""

from __future__ import annotations

import secrets
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

from redis.exceptions import RedisClusterException, RedisError

from django_ratelimits.engine.core import Engine
from django_ratelimits.engine.errors import BackendError
from django_ratelimits.engine.limits import Identity

_ERRORS = (RedisError, RedisClusterException)

_RECORD = """
local now_ms
if ARGV[1] ~= '' then
  now_ms = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local cap, ttl = tonumber(ARGV[2]), tonumber(ARGV[3])
local a = 4
for k = 1, #KEYS, 4 do
  local record, index, by_count, hits = KEYS[k], KEYS[k + 1], KEYS[k + 2], KEYS[k + 3]
  local ident, origin, n, np = ARGV[a], tonumber(ARGV[a + 1]), ARGV[a + 2], tonumber(ARGV[a + 3])
  local nh, last = tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])
  if last <= 0 or last > now_ms then
    last = now_ms
  end
  a = a + 6
  local first = tonumber(redis.call('HGET', record, 'first'))
  local live = first ~= nil and first <= origin
  for i = 1, np do
    if live then
      redis.call('HINCRBY', record, 'd:' .. ARGV[a], ARGV[a + 1])
    end
    a = a + 2
  end
  if live then
    local total = redis.call('HINCRBY', record, 'n', n)
    if last > (tonumber(redis.call('HGET', record, 'last')) or 0) then
      redis.call('HSET', record, 'last', last)
      redis.call('ZADD', index, 'XX', last, ident)
    end
    redis.call('ZADD', by_count, 'XX', total, ident)
    if nh > 0 then
      for i = a, a + nh - 1, 100 do -- unpack a hundred at most: Lua's stack is small
        redis.call('LPUSH', hits, unpack(ARGV, i, math.min(i + 99, a + nh - 1)))
      end
      redis.call('LTRIM', hits, 0, cap - 1)
      if redis.call('PTTL', hits) < ttl then
        redis.call('PEXPIRE', hits, ttl)
      end
    end
  end
  a = a + nh
end
return 0
"""


@dataclass
class Tally:
    """The denials of one identity answered locally since the last batch: ``requests``
    refused, the count per policy (a request denied by two policies counts once in
    ``requests`` and once under each), and their hit entries, oldest first (only
    the newest the metadata list keeps are kept). ``last_ms``: Redis' time of the
    latest (as well as the worker knows it), its record's time of last denial; 0 for
    the time the batch is recorded."""

    requests: int = 0
    last_ms: int = 0
    policies: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    hits: list[str] = field(default_factory=list)


class Denials:
    """The epoch and the batches of one engine's key space."""

    def __init__(self, engine: Engine, *, metadata_ttl: int = 3600) -> None:
        self.engine = engine
        self.metadata_ttl_ms = metadata_ttl * 1000
        self.epoch_key = f"{engine.keys.prefix}:deny-epoch"
        self._record = engine.client.register_script(_RECORD)

    def epoch(self) -> int:
        """The epoch now (one round trip), set first if Redis has none."""
        try:
            pipe = self.engine.client.pipeline(transaction=False)
            pipe.set(self.epoch_key, secrets.randbits(62), nx=True)
            pipe.get(self.epoch_key)
            return int(pipe.execute()[1])
        except _ERRORS as exc:
            raise BackendError(f"could not read the denial epoch: {exc}") from exc

    def bump(self) -> None:
        """Tell every worker to drop its cached denials (within ``POLICY_REFRESH``)."""
        try:
            self.engine.client.incr(self.epoch_key)
        except _ERRORS as exc:
            raise BackendError(f"could not bump the denial epoch: {exc}") from exc

    def record(self, batch: Mapping[tuple[Identity, int], Tally]) -> None:
        """Add ``batch`` (by identity and the Redis time, in ms, of the denial its
        cached answer came from) to the offender records: one script call per slot."""
        clock = self.engine.clock
        now = "" if clock is None else str(clock.now_us() // 1000)
        head: list[str | int] = [now, self.engine.metadata_max_entries, self.metadata_ttl_ms]
        calls: dict[str, tuple[list[str], list[str | int]]] = {}
        for (identity, origin_ms), tally in batch.items():
            keys = self.engine.keys.of(identity)
            # The keys of one shard share a slot: one call per shard.
            names, args = calls.setdefault(keys.index, ([], list(head)))
            names += [keys.record, keys.index, keys.count_index, keys.metadata]
            args += [
                keys.ident, origin_ms, tally.requests, len(tally.policies), len(tally.hits),
                tally.last_ms,
            ]  # fmt: skip
            for policy, count in tally.policies.items():
                args += [policy, count]
            args += tally.hits
        try:
            for names, args in calls.values():
                self._record(keys=names, args=args)
        except _ERRORS as exc:
            raise BackendError(f"could not record a batch of denials: {exc}") from exc
