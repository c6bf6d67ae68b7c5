-- The driver: decides every (identity, limit) of one request in one call.
--
-- ARGV: now_us ('' = Redis TIME), mode ('c' check | 'p' peek), cost, groups,
--       metadata cap, metadata ttl ms, offender retention ms, index cap,
--       then per group: nlimits, ident, label, metadata ('' = none),
--       then per limit: algorithm, limit, window_us, capacity, policy.
-- KEYS: per group: metadata list, offender record, offender index (by last
--       denial), offender index (by denial count), override, then one state
--       key per limit. All keys of a group share one hash tag.
-- Returns {now_us, then per limit: allowed, remaining, retry_us, reset_us}.
--
-- A group is one identity and is all or nothing: if any of its limits denies,
-- none of its limits is charged. An override ("b:<until_us>" blocked, or
-- "a:<until_us>" allow-listed, until that time) decides the whole group
-- without looking at its limits.

local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
  TTL_EXTRA_MS = 60000
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local charge = ARGV[2] == 'c'
local cost = tonumber(ARGV[3])
local groups = tonumber(ARGV[4])
local meta_cap = tonumber(ARGV[5])
local meta_ttl = tonumber(ARGV[6])
local retention = tonumber(ARGV[7])
local index_cap = tonumber(ARGV[8])
local now_ms = floor(now / 1000)

local TRIM_BATCH = 100

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
  end
end

-- Bounded bookkeeping of a denial: per-identity counts on every denial, the
-- shared indexes touched at most once a second per identity.
local function record_denial(record, index, by_count, ident, label, policies)
  redis.call('HSET', record, 'id', label, 'last', now_ms)
  redis.call('HSETNX', record, 'first', now_ms)
  local n = redis.call('HINCRBY', record, 'n', 1)
  for policy in pairs(policies) do
    redis.call('HINCRBY', record, 'd:' .. policy, 1)
  end
  local indexed = tonumber(redis.call('HGET', record, 'ix'))
  if indexed == nil or now_ms - indexed >= 1000 then
    redis.call('HSET', record, 'ix', now_ms)
    redis.call('ZADD', index, now_ms, ident)
    redis.call('ZADD', by_count, n, ident)
    trim(index, by_count, now_ms - retention)
    redis.call('PEXPIRE', index, retention + TTL_EXTRA_MS)
    redis.call('PEXPIRE', by_count, retention + TTL_EXTRA_MS)
  end
  redis.call('PEXPIRE', record, retention + TTL_EXTRA_MS)
end

-- The override of an identity in force now: 'a' (allow-listed), 'b' (blocked)
-- or nil, and until when.
local function override_of(key)
  local value = redis.call('GET', key)
  if value then
    local until_us = tonumber(string.sub(value, 3))
    if until_us and until_us > now then
      return string.sub(value, 1, 1), until_us
    end
  end
  return nil, 0
end

local out = {now}
local a, k = 9, 1
for _ = 1, groups do
  local nlimits, ident, label, meta = tonumber(ARGV[a]), ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  local meta_key, record, index, by_count = KEYS[k], KEYS[k + 1], KEYS[k + 2], KEYS[k + 3]
  local override, override_until = override_of(KEYS[k + 4])
  a, k = a + 4, k + 5
  local pending, denied, all_allowed = {}, {}, true
  for _ = 1, nlimits do
    local alg = ALG[ARGV[a]]
    local limit, window = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
    local capacity, policy = tonumber(ARGV[a + 3]), ARGV[a + 4]
    local key = KEYS[k]
    a, k = a + 5, k + 1
    local allowed, remaining, retry, reset, state
    if override == 'a' then
      allowed, remaining, retry, reset = true, limit, 0, 0
    elseif override == 'b' then
      allowed, remaining = false, 0
      retry, reset = override_until - now, override_until - now
      policy = '!blocked'
    else
      allowed, remaining, retry, reset, state = alg.peek(key, now, limit, window, capacity, cost)
    end
    out[#out + 1] = allowed and 1 or 0
    out[#out + 1] = remaining
    out[#out + 1] = retry
    out[#out + 1] = reset
    if not allowed then
      all_allowed = false
      denied[policy] = true
    elseif override == nil then
      pending[#pending + 1] = {alg, key, limit, window, capacity, state}
    end
  end
  if charge then
    if all_allowed then
      for _, p in ipairs(pending) do
        p[1].commit(p[2], now, p[3], p[4], p[5], cost, p[6])
      end
    else
      record_denial(record, index, by_count, ident, label, denied)
    end
    if meta ~= '' then
      redis.call('LPUSH', meta_key, meta .. '|' .. fmt(now_ms) .. '|' .. (all_allowed and 'A' or 'D'))
      redis.call('LTRIM', meta_key, 0, meta_cap - 1)
      redis.call('PEXPIRE', meta_key, meta_ttl + TTL_EXTRA_MS)
    end
  end
end
return out
