-- django-ratelimits: the check script is this prelude, one file per algorithm
-- and check.lua, joined in that order into one script loaded once (EVALSHA).
--
-- Every algorithm registers ALG[code] = {peek = ..., commit = ...}:
--   peek(key, now, limit, window, capacity, cost)
--     -> allowed, remaining, retry_us, reset_us, state
--   decides without writing; remaining/retry/reset describe the state as it
--   would be if the request were charged (allowed) or as it is (denied).
--   commit(key, now, limit, window, capacity, cost, state) writes the charge.
-- Times are integer microseconds held in Lua doubles (exact below 2^53).
-- Numbers reach Redis only as command arguments (Redis formats them exactly)
-- or through fmt(): never through `..`, which would keep only 14 digits.

local ALG = {}
local floor, ceil, max, min = math.floor, math.ceil, math.max, math.min
-- Set by check.lua: extra TTL while a test clock drives time (ms).
local TTL_EXTRA_MS = 0

local function fmt(n)
  return string.format('%d', n)
end

-- Every key gets a TTL: the time (us) until its state stops mattering.
local function expire_in(key, us)
  redis.call('PEXPIRE', key, max(1, ceil(us / 1000)) + TTL_EXTRA_MS)
end
