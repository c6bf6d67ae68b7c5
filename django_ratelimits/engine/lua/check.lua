-- The driver: decides every (identity, limit) of one request in one call.
--
-- ARGV: now_us ('' = Redis TIME), mode ('c' check | 'p' peek), cost, groups,
--       metadata cap, metadata ttl ms, offender retention ms, index cap,
--       then per group: nlimits, ident, label, metadata ('' = none),
--       then per limit: algorithm, limit, window_us, capacity, policy.
-- KEYS: per group: metadata list, offender record, offender index, then one
--       state key per limit. All keys of a group share one hash tag.
-- Returns {now_us, then per limit: allowed, remaining, retry_us, reset_us}.
--
-- A group is one identity and is all or nothing: if any of its limits denies,
-- none of its limits is charged.

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

-- Bounded bookkeeping of a denial: per-identity counts on every denial, the
-- shared index touched at most once a second per identity.
local function record_denial(record, index, ident, label, policies)
  redis.call('HSET', record, 'id', label, 'last', now_ms)
  redis.call('HSETNX', record, 'first', now_ms)
  redis.call('HINCRBY', record, 'n', 1)
  for policy in pairs(policies) do
    redis.call('HINCRBY', record, 'd:' .. policy, 1)
  end
  local indexed = tonumber(redis.call('HGET', record, 'ix'))
  if indexed == nil or now_ms - indexed >= 1000 then
    redis.call('HSET', record, 'ix', now_ms)
    redis.call('ZADD', index, now_ms, ident)
    redis.call('ZREMRANGEBYSCORE', index, '-inf', now_ms - retention)
    local size = redis.call('ZCARD', index)
    if size > index_cap then
      redis.call('ZREMRANGEBYRANK', index, 0, size - index_cap - 1)
    end
    redis.call('PEXPIRE', index, retention + TTL_EXTRA_MS)
  end
  redis.call('PEXPIRE', record, retention + TTL_EXTRA_MS)
end

local out = {now}
local a, k = 9, 1
for _ = 1, groups do
  local nlimits, ident, label, meta = tonumber(ARGV[a]), ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  local meta_key, record, index = KEYS[k], KEYS[k + 1], KEYS[k + 2]
  a, k = a + 4, k + 3
  local pending, denied, all_allowed = {}, {}, true
  for i = 1, nlimits do
    local alg = ALG[ARGV[a]]
    local limit, window = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
    local capacity, policy = tonumber(ARGV[a + 3]), ARGV[a + 4]
    local key = KEYS[k]
    a, k = a + 5, k + 1
    local allowed, remaining, retry, reset, state = alg.peek(key, now, limit, window, capacity, cost)
    out[#out + 1] = allowed and 1 or 0
    out[#out + 1] = remaining
    out[#out + 1] = retry
    out[#out + 1] = reset
    if allowed then
      pending[#pending + 1] = {alg, key, limit, window, capacity, state}
    else
      all_allowed = false
      denied[policy] = true
    end
  end
  if charge then
    if all_allowed then
      for _, p in ipairs(pending) do
        p[1].commit(p[2], now, p[3], p[4], p[5], cost, p[6])
      end
    else
      record_denial(record, index, ident, label, denied)
    end
    if meta ~= '' then
      redis.call('LPUSH', meta_key, meta .. '|' .. fmt(now_ms) .. '|' .. (all_allowed and 'A' or 'D'))
      redis.call('LTRIM', meta_key, 0, meta_cap - 1)
      redis.call('PEXPIRE', meta_key, meta_ttl + TTL_EXTRA_MS)
    end
  end
end
return out
