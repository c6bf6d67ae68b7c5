-- django-ratelimits: the check script is this prelude, override.lua, one file
-- per algorithm, ban.lua, concurrency.lua and check.lua, joined in that order
-- (engine/script.py) into one script loaded once (a function, or EVALSHA).
-- Staff's override script is this prelude and override.lua.
--
-- An identity's limits live as fields of one HASH (its state key), so that
-- one HMGET reads and one HSET writes all of them. Every algorithm but the
-- sliding log is a pure function of a field's value:
--
--   ALG[code].peek(value, now, limit, window, capacity, cost, state_key, field)
--     -> allowed, remaining, retry_us, reset_us, new_value, live_us
--
-- (`state_key` and `field` name where the value is kept: the sliding window keeps its
-- reading of a busy identity's value by them, sliding_window.lua.)
--
-- `value` is the field's string (nil when absent); remaining/retry/reset
-- describe the state as it would be if the request were charged (allowed) or
-- as it is (denied). When allowed, `new_value` is the field's next value and
-- `live_us` how long it matters: the key must not expire before then. No
-- value relies on expiry to be read correctly: each holds the time it is of.
--
-- The sliding log keeps a ZSET of its own (ALG.log.zset = true) and reads and
-- writes it itself: peek(key, ...) -> ..., state; commit(key, ..., state).
--
-- Times are integer microseconds held in Lua doubles (exact below 2^53).
-- Numbers reach Redis through fmt()/fmt_float(), never through `..`, which
-- keeps only 14 digits, nor as numbers: Redis would format each with '%.17g',
-- several times dearer than fmt()'s '%d'. Constants go as strings ('1').
-- Text known to be digits (a pattern's %d capture, what Python sent, TIME's
-- reply) is read by arithmetic (`s + 0`): Lua 5.1's tonumber() runs strtod twice
-- (is it a number, then which). A stored value read whole keeps tonumber(), so
-- that one that is not a number reads as absent instead of failing the call.

local ALG = {}
-- Every global the code uses, as a local: in a Redis 7 function a global
-- costs a lookup through the library's environment (about 370 instructions),
-- a local nothing. Bound by bind() at the first call (a Redis 7 function
-- library runs its top level where `math` is not yet visible), then kept
-- while Redis keeps the code loaded; bound on every call of a script.
local floor, ceil, max, min, tonumber, ipairs, pairs, unpack
local sformat, smatch, sgmatch, ssub, sbyte, sfind, sgsub, srep
local tconcat, tsort, rcall, spack

local function bind()
  if rcall then
    return
  end
  floor, ceil, max, min = math.floor, math.ceil, math.max, math.min
  tonumber, ipairs, pairs, unpack = _G.tonumber, _G.ipairs, _G.pairs, _G.unpack
  sformat, smatch, sgmatch, ssub = string.format, string.match, string.gmatch, string.sub
  sbyte, sfind, sgsub, srep = string.byte, string.find, string.gsub, string.rep
  tconcat, tsort, rcall, spack = table.concat, table.sort, redis.call, struct.pack
end
-- Whether Redis keeps this code loaded between calls: true in the Redis 7 function
-- library (engine/script.py sets it as the library is loaded), false in the script,
-- whose body runs anew on every call. What the code keeps between calls only pays
-- where it is kept.
local KEPT = false
-- The state HASH's field holding until when its TTL lasts (ms); never a spec,
-- which always holds '|'.
local HORIZON = 't'
-- The state HASH's field holding the identity's override (engine/overrides.py).
local OVERRIDE = 'x'
-- Set by check.lua: extra TTL while a test clock drives time (ms).
local TTL_EXTRA_MS = 0

-- fmt() is for the paths a check seldom takes: the algorithms' charges, which every
-- allowed limit runs, call sformat themselves (one format for a value's numbers), and
-- the driver looks its caches up before it calls their parsers. Each Lua call saved
-- is about 350 instructions of Redis' CPU, each C call (math.max...) about 165
-- (python -m benchmarks.instructions).
local function fmt(n)
  return sformat('%d', n)
end

-- A double written so that tonumber() reads back the same double.
local function fmt_float(n)
  return sformat('%.17g', n)
end

-- The start of every key name of the identity whose state HASH is `state_key`
-- ("P:{sN}", keys.py: the state key is "<tag>:s:<ident>", and the prefix P
-- holds no '}'), and its ident.
local function who_of(state_key)
  local close = sfind(state_key, '}', 1, true)
  return ssub(state_key, 1, close), ssub(state_key, close + 4)
end

local function expire_in(key, us)
  rcall('PEXPIRE', key, fmt(max(1, ceil(us / 1000)) + TTL_EXTRA_MS))
end
