-- The driver: decides every (identity, limit) of one request in one call.
--
-- ARGV: now_us ('' = Redis TIME), mode ('c' check | 'p' peek), cost, entries,
--       metadata cap, metadata ttl ms, offender retention ms, index cap,
--       then per group: nlimits, ident, label, metadata ('' = none, else
--       "<d or a><e or s><head of a hit entry>": record on a denial or on every
--       hit, from an enforced or a shadow group),
--       then per limit its spec "<algorithm>|<limit>|<window_us>|<capacity>|<policy>",
--       which is also the limit's field in the state HASH. An entry is a group
--       or a gated group (see check() at the end).
-- KEYS: per group: state HASH, metadata list, offender record, offender index
--       (by last denial), offender index (by denial count), override, then
--       one ZSET per sliding-log limit. A shadow group names the shadow record
--       and indexes instead of the offender ones; a group that no override may
--       decide (the way back to admin, way_back.py) names a key no one writes
--       ("...:x-") instead of the override. All keys of a group share one hash
--       tag. A gated group starts with the client's identity budget (ZSET).
-- Returns one string of 64-bit little-endian integers (struct.pack): now_us,
-- then per limit its outcome (1 allowed, 0 denied by the limit, 2 denied by a
-- block), remaining, retry_us, reset_us, with a gate's verdict (1 or 0) before
-- the limits it decided. (Packing costs Lua no number-to-text conversion, and
-- one string is cheaper for Redis to reply and for the client to read than an
-- array of numbers.) Hit entries are written, never returned: the reply stays
-- four numbers per limit.
--
-- A group is one identity and is all or nothing: if any of its limits denies,
-- none of its limits is charged. An override ("b:<until_us>" blocked, or
-- "a:<until_us>" allow-listed, until that time) decides the whole group
-- without looking at its limits.
--
-- A charge extends the state HASH's TTL only when a field it writes must
-- outlive it, and then by a quarter more than needed, so that a busy
-- identity's key is not given a new TTL on every request; the TTL never
-- shrinks, whatever other policies' fields the key holds. The HASH's field
-- 't' (HORIZON) says until when (ms on the engine's clock) its TTL lasts, so
-- the HMGET that reads the limits also says whether the TTL must be extended:
-- no PTTL per call.
-- The metadata list is trimmed back to its cap once it is a fifth over it;
-- readers read the newest `cap` entries. A request is one entry in a list,
-- however many groups of the call name that list (an enforced and a shadow
-- group of one identity): see note_hit.

-- Set at the start of every call (check), read by the functions below.
local now, now_ms, charge, cost, meta_cap, meta_ttl, retention, index_cap
-- The hit entries of this call, by metadata list, and the lists in order.
local hits, hit_lists

local TRIM_BATCH = 100
-- The state HASH's field holding until when its TTL lasts (ms); never a spec,
-- which always holds '|'.
local HORIZON = 't'

-- The struct.pack format of a reply of n numbers, built once per n where Redis
-- keeps the code loaded.
local PACKINGS = {}

local function packing(n)
  local format = PACKINGS[n]
  if format == nil then
    format = '<' .. string.rep('i8', n)
    PACKINGS[n] = format
  end
  return format
end

-- Entries last seen before `cutoff`, then the oldest past the cap, leave both
-- indexes: at most TRIM_BATCH of each per call, so no call is ever long.
local function trim(index, by_count, cutoff)
  local old = redis.call('ZRANGEBYSCORE', index, '-inf', cutoff, 'LIMIT', 0, TRIM_BATCH)
  if #old > 0 then
    redis.call('ZREM', index, unpack(old))
    redis.call('ZREM', by_count, unpack(old))
  end
  local over = redis.call('ZCARD', index) - index_cap
  if over > 0 then
    local oldest = redis.call('ZRANGE', index, 0, min(over, TRIM_BATCH) - 1)
    redis.call('ZREM', index, unpack(oldest))
    redis.call('ZREM', by_count, unpack(oldest))
    -- Their offender records would outlive them by up to the retention, so that
    -- memory under a flood of identities would be bounded by time, not by the
    -- cap: drop them too. A record is "P:{sN}:o:<ident>" (keys.py), the index
    -- "P:{sN}:ox" (shadow: "P:{sN}:so:<ident>", "P:{sN}:sox"): same slot.
    local tag = string.sub(index, 1, -2)
    for i, who in ipairs(oldest) do
      oldest[i] = tag .. ':' .. who
    end
    redis.call('UNLINK', unpack(oldest))
  end
end

-- Bounded bookkeeping of a denial: the counts on every denial; the time of
-- the last denial, the shared indexes and the record's TTL at most once a
-- second per identity.
local function record_denial(record, index, by_count, ident, label, policies)
  local n = redis.call('HINCRBY', record, 'n', 1)
  for policy in pairs(policies) do
    redis.call('HINCRBY', record, 'd:' .. policy, 1)
  end
  local indexed = n > 1 and tonumber(redis.call('HGET', record, 'ix'))
  if indexed and now_ms - indexed < 1000 then
    return
  end
  if n == 1 then
    redis.call('HSET', record, 'id', label, 'first', now_ms, 'last', now_ms, 'ix', now_ms)
  else
    redis.call('HSET', record, 'id', label, 'last', now_ms, 'ix', now_ms)
  end
  redis.call('ZADD', index, now_ms, ident)
  redis.call('ZADD', by_count, n, ident)
  trim(index, by_count, now_ms - retention)
  redis.call('PEXPIRE', index, retention + TTL_EXTRA_MS)
  redis.call('PEXPIRE', by_count, retention + TTL_EXTRA_MS)
  redis.call('PEXPIRE', record, retention + TTL_EXTRA_MS)
end

-- The override of an identity in force now: 'a' (allow-listed), 'b' (blocked)
-- or nil, and until when. The value is "<a or b>:<until_us>", digits only;
-- anything else is no override (engine/overrides.py is the Python side).
local function override_of(key)
  local value = redis.call('GET', key)
  if value then
    local mode, until_us = string.match(value, '^([ab]):(%d+)$')
    until_us = tonumber(until_us)
    if until_us and until_us > now then
      return mode, until_us
    end
  end
  return nil, 0
end

-- Charges an allowed group: one HSET of every field, the TTL extended only
-- if the key's `horizon` (its HORIZON field, read with the limits) falls short
-- of what the fields need, then the sliding logs.
local function commit(state_key, writes, live, horizon, logs)
  if #writes > 0 then
    if (tonumber(horizon) or 0) < now_ms + ceil(live / 1000) then
      local ttl = ceil(live / 1000 * 1.25) + 1
      writes[#writes + 1] = HORIZON
      writes[#writes + 1] = now_ms + ttl
      redis.call('HSET', state_key, unpack(writes))
      redis.call('PEXPIRE', state_key, ttl + TTL_EXTRA_MS)
    else
      redis.call('HSET', state_key, unpack(writes))
    end
  end
  for _, p in ipairs(logs) do
    ALG.log.commit(p[1], now, p[2], cost, p[3])
  end
end

-- The list lives at least METADATA_TTL after its newest entry, at most a quarter
-- more: its TTL is set to 1.25 times that only once less than the whole is left.
local function push_metadata(key, entry)
  local length = redis.call('LPUSH', key, entry)
  if length > meta_cap + ceil(meta_cap / 5) then
    redis.call('LTRIM', key, 0, meta_cap - 1)
  end
  if length == 1 or redis.call('PTTL', key) < meta_ttl + TTL_EXTRA_MS then
    redis.call('PEXPIRE', key, ceil(meta_ttl * 1.25) + TTL_EXTRA_MS)
  end
end

-- Notes what a group decided for the request's entry in the list `key`; `meta`
-- is the group's "<d or a><e or s><head>" and `limits` its {spec, key, name,
-- allowed}. The entry's outcome is the worst of its groups': 'D' denied by an
-- enforced policy, 'S' only a shadow policy would have denied, 'A' allowed.
local function note_hit(key, meta, limits)
  local hit = hits[key]
  if hit == nil then
    hit = {head = string.sub(meta, 3), every = false, outcome = 'A', names = {}}
    hits[key] = hit
    hit_lists[#hit_lists + 1] = key
  end
  hit.every = hit.every or string.byte(meta, 1) == 97 -- 'a'
  local no = string.byte(meta, 2) == 115 and 'S' or 'D' -- 's': a shadow group
  for _, lk in ipairs(limits) do
    local status = lk[4] and 'A' or no
    local seen = hit.names[lk[3]]
    if seen == nil or seen == 'A' or status == 'D' then
      if seen == nil then
        hit.names[#hit.names + 1] = lk[3]
      end
      hit.names[lk[3]] = status
    end
    if status == 'D' or (status == 'S' and hit.outcome == 'A') then
      hit.outcome = status
    end
  end
end

-- Pushes the entries noted in this call that their recording asks for: every
-- hit, or only those some policy denied or would have denied. An entry reads
-- "<head>|<ms>|<outcome>|<policy>=<A, D or S>,..." (engine/hits.py).
local function push_hits()
  for _, key in ipairs(hit_lists) do
    local hit = hits[key]
    if hit.every or hit.outcome ~= 'A' then
      local names = {}
      for i, name in ipairs(hit.names) do
        names[i] = name .. '=' .. hit.names[name]
      end
      local entry = string.format('%s|%d|%s|%s', hit.head, now_ms, hit.outcome,
        table.concat(names, ','))
      push_metadata(key, entry)
    end
  end
end

-- A limit's spec, parsed: {algorithm, limit, window, capacity, policy, spec,
-- the policy's name as a hit entry names it (no '|', ',' or '=')}.
-- Kept between calls where Redis keeps the code loaded (a Redis 7 function
-- library), up to SPECS_MAX of them; parsed on every call otherwise.
local SPECS, SPECS_MAX, nspecs = {}, 1000, 0

local function parse_spec(spec)
  local l = SPECS[spec]
  if l == nil then
    local code, limit, window, capacity, policy =
      string.match(spec, '^(%a+)|(%d+)|(%d+)|(%d+)|(.*)$')
    local named = string.gsub(policy, '[|,=]', '_')
    l = {ALG[code], tonumber(limit), tonumber(window), tonumber(capacity), policy, spec, named}
    if nspecs >= SPECS_MAX then
      SPECS, nspecs = {}, 0
    end
    SPECS[spec], nspecs = l, nspecs + 1
  end
  return l
end

-- Decides one identity's group: its six keys from KEYS[k] (state, metadata,
-- record, index, by-count index, override) then one per sliding log; its
-- arguments from ARGV[a] (count, ident, label, metadata, one spec per limit).
-- Appends a result per limit to `out`; returns where the next group starts.
local function run_group(KEYS, ARGV, a, k, out)
  local nlimits, ident, label, meta = tonumber(ARGV[a]), ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  local state_key, meta_key, record, index, by_count = KEYS[k], KEYS[k + 1], KEYS[k + 2],
    KEYS[k + 3], KEYS[k + 4]
  local override, override_until = override_of(KEYS[k + 5])
  a, k = a + 4, k + 6
  -- Every hash-held field of the group, and the key's horizon, are read with one HMGET.
  local limits, fields = {}, {HORIZON}
  for i = 1, nlimits do
    local spec = ARGV[a]
    local l = parse_spec(spec)
    local key
    if l[1].zset then
      key = KEYS[k]
      k = k + 1
    else
      fields[#fields + 1] = spec
      key = #fields
    end
    limits[i] = {l, key}
    a = a + 1
  end
  local values = {}
  if override == nil and #fields > 1 then
    values = redis.call('HMGET', state_key, unpack(fields))
  end
  local writes, live, logs, denied, all_allowed = {}, 0, {}, {}, true
  for _, lk in ipairs(limits) do
    local l, key = lk[1], lk[2]
    local alg, limit, window, capacity, policy = l[1], l[2], l[3], l[4], l[5]
    local allowed, remaining, retry, reset, new, lives
    if override == 'a' then
      allowed, remaining, retry, reset = true, limit, 0, 0
    elseif override == 'b' then
      allowed, remaining = false, 0
      retry, reset = override_until - now, override_until - now
      policy = '!blocked' -- overrides.BLOCKED_POLICY
    elseif alg.zset then
      allowed, remaining, retry, reset, new = alg.peek(key, now, limit, window, capacity, cost)
      if allowed then
        logs[#logs + 1] = {key, window, new}
      end
    else
      allowed, remaining, retry, reset, new, lives =
        alg.peek(values[key] or nil, now, limit, window, capacity, cost)
      if allowed then
        writes[#writes + 1] = l[6]
        writes[#writes + 1] = new
        live = max(live, lives)
      end
    end
    local n = #out
    out[n + 1] = allowed and 1 or (override == 'b' and 2 or 0)
    out[n + 2], out[n + 3], out[n + 4] = remaining, retry, reset
    lk[3] = override == 'b' and '!blocked' or l[7]
    lk[4] = allowed
    if not allowed then
      all_allowed = false
      denied[policy] = true
    end
  end
  if charge then
    if all_allowed then
      commit(state_key, writes, live, values[1], logs)
    else
      record_denial(record, index, by_count, ident, label, denied)
    end
    if meta ~= '' then
      note_hit(meta_key, meta, limits)
    end
  end
  return a, k
end

-- Where the group at ARGV[a], KEYS[k] ends, without deciding it.
local function skip_group(ARGV, a, k)
  local nlimits = tonumber(ARGV[a])
  local logs = 0
  for i = a + 4, a + 3 + nlimits do
    if parse_spec(ARGV[i])[1].zset then
      logs = logs + 1
    end
  end
  return a + 4 + nlimits, k + 6 + logs
end

-- A client's identity budget (a ZSET: member = an identity's digest, score =
-- when it last passed): whether `member` passes, i.e. it passed within the
-- window or fewer than `budget` others did. Charging, a passing member's time
-- is renewed and members older than the window are dropped first: the ZSET
-- never holds more than `budget` members, and lives one window after the last
-- identity passed.
local function pass_gate(key, member, budget, window)
  local cutoff = now - window
  local seen = tonumber(redis.call('ZSCORE', key, member))
  local passed = seen ~= nil and seen > cutoff
  if not passed then
    local held
    if charge then
      redis.call('ZREMRANGEBYSCORE', key, '-inf', cutoff)
      held = redis.call('ZCARD', key)
    else
      held = redis.call('ZCOUNT', key, '(' .. fmt(cutoff), '+inf')
    end
    passed = held < budget
  end
  if passed and charge then
    redis.call('ZADD', key, now, member)
    expire_in(key, window)
  end
  return passed
end

-- The entry point: the script's body ends with `return check(KEYS, ARGV)`;
-- on Redis 7 the same code is a function library that registers it.
--
-- ARGV[4] entries follow the header: each is a group (run_group), or a gated
-- group: 'g', budget, window, member, then 2 or 1 groups. With 2, the client
-- IP's group (the fallback) and the identity's: the gate's verdict (1 or 0)
-- decides which one runs; the other is skipped, unread and unwritten. With 1,
-- only the fallback: it runs if the gate refuses; if the gate lets the
-- identity through, Python sends the identity's group in a second call (its
-- keys live in another slot of a cluster).
local function check(KEYS, ARGV)
  bind()
  if ARGV[1] ~= '' then
    now = tonumber(ARGV[1])
    TTL_EXTRA_MS = 60000
  else
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
    TTL_EXTRA_MS = 0
  end
  charge = ARGV[2] == 'c'
  cost = tonumber(ARGV[3])
  meta_cap = tonumber(ARGV[5])
  meta_ttl = tonumber(ARGV[6])
  retention = tonumber(ARGV[7])
  index_cap = tonumber(ARGV[8])
  now_ms = floor(now / 1000)
  hits, hit_lists = {}, {}
  local out = {now}
  local a, k = 9, 1
  for _ = 1, tonumber(ARGV[4]) do
    if ARGV[a] ~= 'g' then
      a, k = run_group(KEYS, ARGV, a, k, out)
    else
      local passed = pass_gate(KEYS[k], ARGV[a + 3], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]))
      local both = ARGV[a + 4] == '2'
      out[#out + 1] = passed and 1 or 0
      a, k = a + 5, k + 1
      if passed then
        a, k = skip_group(ARGV, a, k)
        if both then
          a, k = run_group(KEYS, ARGV, a, k, out)
        end
      else
        a, k = run_group(KEYS, ARGV, a, k, out)
        if both then
          a, k = skip_group(ARGV, a, k)
        end
      end
    end
  end
  push_hits()
  return struct.pack(packing(#out), unpack(out))
end
