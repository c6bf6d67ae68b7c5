-- The driver: decides every (identity, limit) of one request in one call.
--
-- ARGV: now_us (only on a test clock: else the script reads Redis' TIME), the
--       call's settings "<c or p>|<cost>|
--       <metadata cap>|<metadata ttl ms>|<offender retention ms>|<index cap>"
--       (check or peek), in a call that may take concurrency slots 'r' and
--       the request's id, then entries to the end, each a group or a gated
--       group (see check() at the end). A group is two arguments: its limits,
--       and its info "<label>\n<head of a hit entry>" (the identity as the
--       dashboard names it, and what a hit entry starts with; neither holds a
--       '\n'). The identity's ident is its state key's end (who_of). Its limits
--       are one string: "<e or s><o or x><n, d or a><r or c>" (an enforced or a
--       shadow group; decided by an override or never; no hit entry, or one
--       recorded on a denial or on every hit; a group whose denial refuses the
--       request, a soft one, charged only if the call's refusing groups pass (see
--       run_group), or one that refuses and reserves failed logins in flight:
--       attempts.lua), then each limit's spec
--       "<algorithm>|<limit>|<window_us>|<capacity>|<policy>" (also the
--       limit's field in the state HASH) after its length and ':', or after
--       "<length>*<cost>:" when the limit charges its own cost instead of the
--       call's (a policy's cost per request, docs/cost.md), then its policy's
--       ban if it has one (ban.lua). Settings
--       and limits come back call after call: each string is parsed once
--       where Redis keeps the code loaded (see remember).
-- KEYS: per group: state HASH ("P:{sN}:s:<ident>"), then one ZSET per
--       sliding-log or concurrency limit, then a group that reserves its attempts in
--       flight (attempts.lua). A group that no override may decide (the way
--       back to admin, way_back.py) says 'x' in its flags. The metadata list, the
--       offender (or shadow) record and the shard's two indexes are named from the
--       state key (who_of) when they are written: every key of a group shares its hash
--       tag, so its slot. A gated group starts with the client's identity
--       budget (ZSET).
-- Returns one string of 64-bit little-endian integers (struct.pack): now_us,
-- then per limit its outcome (1 allowed, 0 denied by the limit, 2 denied by a
-- block, 3 refused only for the failed logins in flight: attempts.lua), remaining, retry_us, reset_us, with a gate's verdict (1 or 0) before
-- the limits it decided. (Packing costs Lua no number-to-text conversion, and
-- one string is cheaper for Redis to reply and for the client to read than an
-- array of numbers.) Hit entries are written, never returned: the reply stays
-- four numbers per limit.
--
-- A group is one identity and is all or nothing: if any of its limits denies,
-- none of its limits is charged. An override (the state HASH's field 'x',
-- OVERRIDE: "b:<until_us>" blocked, or "a:<until_us>" allow-listed, until
-- that time) decides the whole group without looking at its limits.
--
-- A charge extends the state HASH's TTL only when a field it writes must
-- outlive it, and then by a quarter more than needed and at least TTL_SLACK_MS
-- more, so that a busy identity's key is not given a new TTL on every request; the TTL never
-- shrinks, whatever other policies' fields the key holds. The HASH's field
-- 't' (HORIZON) says until when (ms on the engine's clock) its TTL lasts, so
-- the HMGET that reads the limits also says whether the TTL must be extended:
-- no PTTL per call.
-- The metadata list is trimmed back to its cap once it is a fifth over it;
-- readers read the newest `cap` entries. A request is one entry in a list,
-- however many groups of the call name that list (an enforced and a shadow
-- group of one identity): see push_hits.

-- Set at the start of every call (check), read by the functions below.
local now, now_ms, charge, cost, meta_cap, meta_ttl, retention, index_cap
-- The groups that record hits, noted as they run (PENDING_STRIDE slots each in
-- PENDING, a table kept between calls: state key, info, limits, where
-- their outcomes start in OUT, blocked), and whether one records every hit. Their
-- entries are made at the end of the call, and only if one will be written: when
-- a group records every hit, or some group was denied. An allowed request under
-- the default (record denials) makes no entry, so builds nothing.
local PENDING, PENDING_STRIDE = {}, 5
local pending, pending_every
-- How many enforced groups that refuse their request were refused in this call: a
-- soft group is charged only while there are none.
local refusing

-- The denied groups of this call (DENIAL_STRIDE slots each in DENIALS, a table kept
-- between calls: offender record, its tag and ident, info, limits, where their
-- outcomes start in OUT, blocked), `denied` slots used. A request is one denial of an
-- identity, however many of the call's groups name its record (two gates, or a gate's
-- fallback and the IP's own).
local DENIALS, DENIAL_STRIDE = {}, 7
local denied
-- The offender record's field counting the denials of a block (overrides.BLOCKED_POLICY).
local BLOCKED_FIELD = 'd:!blocked'

local TRIM_BATCH = 100
local TTL_SLACK_MS = 1000
-- The reply's numbers and a charge's HSET arguments, filled anew by each call
-- up to a length it keeps (where Redis keeps the code loaded, the tables stay:
-- no new table per call).
local OUT, WRITES = {}, {}

-- The struct.pack format of a reply of n numbers, built once per n where Redis
-- keeps the code loaded.
local PACKINGS = {}

-- Lua's unpack() gives at most about 8000 values: a command of more arguments, or a
-- reply of more numbers, is made in batches of UNPACK_MAX (even: an HSET's field and
-- value stay in one batch). Only a group of about a thousand limits or more (a request
-- that many policies match: admin bounds them by no number) needs it; every other
-- call unpacks its lists whole.
local UNPACK_MAX = 4000

-- rcall(command, key, list[1..n]...) in batches of UNPACK_MAX arguments; the batches'
-- replies joined, if `reads` (HMGET).
local function batched(command, key, list, n, reads)
  local all = {}
  for i = 1, n, UNPACK_MAX do
    local part = rcall(command, key, unpack(list, i, min(n, i + UNPACK_MAX - 1)))
    if reads then
      for j = 1, #part do
        all[i + j - 1] = part[j]
      end
    end
  end
  return all
end

local function packing(n)
  local format = PACKINGS[n]
  if format == nil then
    format = '<' .. srep('i8', n)
    PACKINGS[n] = format
  end
  return format
end

-- Entries last seen before `cutoff`, then the oldest past the cap, leave both
-- indexes: at most TRIM_BATCH of each per call, so no call is ever long.
local function trim(index, by_count, cutoff)
  local old = rcall('ZRANGEBYSCORE', index, '-inf', fmt(cutoff), 'LIMIT', '0',
    fmt(TRIM_BATCH))
  if #old > 0 then
    rcall('ZREM', index, unpack(old))
    rcall('ZREM', by_count, unpack(old))
  end
  local over = rcall('ZCARD', index) - index_cap
  if over > 0 then
    local oldest = rcall('ZRANGE', index, '0', fmt(min(over, TRIM_BATCH) - 1))
    rcall('ZREM', index, unpack(oldest))
    rcall('ZREM', by_count, unpack(oldest))
    -- Their offender records would outlive them by up to the retention, so that
    -- memory under a flood of identities would be bounded by time, not by the
    -- cap: drop them too. A record is "P:{sN}:o:<ident>" (keys.py), the index
    -- "P:{sN}:ox" (shadow: "P:{sN}:so:<ident>", "P:{sN}:sox"): same slot.
    local tag = ssub(index, 1, -2)
    for i, who in ipairs(oldest) do
      oldest[i] = tag .. ':' .. who
    end
    rcall('UNLINK', unpack(oldest))
  end
end

-- The label (the identity as the dashboard names it) and the head of a hit
-- entry in a group's info ("<label>\n<head>").
local function label_of(info)
  return ssub(info, 1, sfind(info, '\n', 1, true) - 1)
end

local function head_of(info)
  return ssub(info, sfind(info, '\n', 1, true) + 1)
end

-- Where `value` is among the first `n` items of `list`: its index, or n + 1 if it is
-- not there (the few names of one request's entry or record are found by a scan).
local function index_in(list, n, value)
  local j = 1
  while j <= n and list[j] ~= value do
    j = j + 1
  end
  return j
end

-- Whether a group noted before slot `p` of the call's `groups` (an array of `stride`
-- slots a group, PENDING or DENIALS) has the same first slot `value`: the groups of
-- one list or record are written with the first of them.
local function noted_before(groups, stride, p, value)
  for q = 0, p - 1, stride do
    if groups[q + 1] == value then
      return true
    end
  end
  return false
end

-- Whether a limit's outcome in OUT is a denial: 0 by its limit, 2 by a block. (1 is
-- allowed; 3 refused only for the failed logins in flight, attempts.lua: no denial.)
local function denies(outcome)
  return outcome == 0 or outcome == 2
end

-- The denial counts of the policies the groups noted from DENIALS[d + 1] on denied
-- (each once, though several groups or limits name it), in the offender `record`.
-- FIELDS is kept between calls and overwritten (a request denies a few policies).
local FIELDS = {}

local function count_policies(record, d)
  local n = 0
  for e = d, denied - 1, DENIAL_STRIDE do
    if DENIALS[e + 1] == record then
      local limits, at, blocked = DENIALS[e + 5].limits, DENIALS[e + 6], DENIALS[e + 7]
      for i = 1, #limits do
        if denies(OUT[at + 4 * i - 3]) then
          local field = blocked and BLOCKED_FIELD or limits[i][9]
          local j = index_in(FIELDS, n, field)
          if j > n then
            FIELDS[j], n = field, j
            rcall('HINCRBY', record, field, '1')
          end
        end
      end
    end
  end
end

-- Bounded bookkeeping of the denial noted at DENIALS[d + 1] (with the call's other
-- groups of its record): the counts, and the count index's score, on every denial; the
-- time of the last denial, the time index and the record's TTL at most once a second
-- per identity. A shadow group's go to the shadow record and indexes.
local function record_denial(d)
  local record, tag, ident = DENIALS[d + 1], DENIALS[d + 2], DENIALS[d + 3]
  local n = rcall('HINCRBY', record, 'n', '1')
  count_policies(record, d)
  local index = tag .. (DENIALS[d + 5].shadow and ':sox' or ':ox')
  local by_count = index .. 'n'
  local indexed = n > 1 and tonumber(rcall('HGET', record, 'ix'))
  if indexed and now_ms - indexed < 1000 then
    -- The count index follows the record on every denial (XX: an identity the index
    -- trimmed stays out): an identity denied in a burst within a second, and never
    -- again, would else rank by its first denial for good.
    rcall('ZADD', by_count, 'XX', fmt(n), ident)
    return
  end
  local label, ms, keep = label_of(DENIALS[d + 4]), fmt(now_ms), fmt(retention + TTL_EXTRA_MS)
  if n == 1 then
    rcall('HSET', record, 'id', label, 'first', ms, 'last', ms, 'ix', ms)
  else
    rcall('HSET', record, 'id', label, 'last', ms, 'ix', ms)
  end
  rcall('ZADD', index, ms, ident)
  rcall('ZADD', by_count, fmt(n), ident)
  trim(index, by_count, now_ms - retention)
  rcall('PEXPIRE', index, keep)
  rcall('PEXPIRE', by_count, keep)
  rcall('PEXPIRE', record, keep)
end

-- Notes the denial of a group (its state key, info, limits `set`, outcomes from
-- OUT[at + 1], whether a block denied it) for record_denials at the end of the call.
local function note_denial(state_key, info, set, at, blocked)
  local tag, ident = who_of(state_key)
  local d = denied
  DENIALS[d + 1] = tag .. (set.shadow and ':so:' or ':o:') .. ident
  DENIALS[d + 2], DENIALS[d + 3], DENIALS[d + 4] = tag, ident, info
  DENIALS[d + 5], DENIALS[d + 6], DENIALS[d + 7] = set, at, blocked
  denied = d + DENIAL_STRIDE
end

-- Records the denials noted in this call, once per offender record.
local function record_denials()
  for d = 0, denied - 1, DENIAL_STRIDE do
    if not noted_before(DENIALS, DENIAL_STRIDE, d, DENIALS[d + 1]) then
      record_denial(d)
    end
  end
end

-- The policies whose limits denied a group (outcomes from OUT[at + 1]), as a set.
local function denied_policies(limits, at)
  local policies = {}
  for i = 1, #limits do
    if denies(OUT[at + 4 * i - 3]) then
      policies[limits[i][5]] = true
    end
  end
  return policies
end

-- Whether a login's group (outcomes from OUT[at + 1]) was refused only for the attempts
-- in flight (attempts.lua): none of its limits denied it on its own.
local function held_back(limits, at)
  for i = 1, #limits do
    if denies(OUT[at + 4 * i - 3]) then
      return false
    end
  end
  return true
end

-- The override in force now of an OVERRIDE field's `value`: 'a' (allow-listed),
-- 'b' (blocked) or nil, and until when. The value is "<a or b>:<until_us>",
-- digits only; anything else is no override (engine/overrides.py is the
-- Python side).
local function override_of(value)
  if value then
    local mode, until_us = smatch(value, '^([ab]):(%d+)$')
    until_us = until_us and until_us + 0 -- digits, or nil
    if until_us and until_us > now then
      return mode, until_us
    end
  end
  return nil, 0
end

-- Charges an allowed group: one HSET of every field, the TTL extended only
-- if the key's `horizon` (its HORIZON field, read with the limits) falls short
-- of what the fields need, then the sliding logs.
local function commit(state_key, writes, nw, live, horizon, logs, wide)
  if nw > 0 then
    -- (Whole ms on both sides: below now_ms + live / 1000 is below its ceiling.)
    local extend = (tonumber(horizon) or 0) < now_ms + live / 1000
    local ttl
    if extend then
      ttl = ceil(live / 1000 + max(live / 4000, TTL_SLACK_MS)) + 1
      writes[nw + 1], writes[nw + 2], nw = HORIZON, fmt(now_ms + ttl), nw + 2
    end
    if wide then
      batched('HSET', state_key, writes, nw, false)
    else
      rcall('HSET', state_key, unpack(writes, 1, nw))
    end
    if extend then
      rcall('PEXPIRE', state_key, fmt(ttl + TTL_EXTRA_MS))
    end
  end
  if logs then
    for _, p in ipairs(logs) do
      p[4].commit(p[1], now, p[2], p[5], p[3])
    end
  end
end

-- The list lives at least METADATA_TTL after its newest entry, at most a quarter
-- more: its TTL is set to 1.25 times that only once less than the whole is left.
local function push_metadata(key, entry)
  local length = rcall('LPUSH', key, entry)
  if length > meta_cap + ceil(meta_cap / 5) then
    rcall('LTRIM', key, '0', fmt(meta_cap - 1))
  end
  if length == 1 or rcall('PTTL', key) < meta_ttl + TTL_EXTRA_MS then
    rcall('PEXPIRE', key, fmt(ceil(meta_ttl * 1.25) + TTL_EXTRA_MS))
  end
end

-- The metadata list of the identity whose state HASH is `state_key`. (Not kept
-- between calls: a table of a thousand names costs every call of the library more in
-- Lua's garbage collector than the names it saves.)
local function list_of(state_key)
  local tag, ident = who_of(state_key)
  return tag .. ':m:' .. ident
end

-- One entry's policies in order (NAMES), their outcomes (STATUSES) and their joined
-- parts (PARTS): arrays kept between calls and overwritten by each entry, so that no
-- entry makes a table (an entry names a few policies: a name is found by a scan).
local NAMES, STATUSES, PARTS = {}, {}, {}

-- Notes that the policy `name` decided `status` for the entry whose n policies NAMES
-- holds: its outcome is the worst its limits decided ('D', then 'S', then 'A').
-- Returns how many policies the entry names now.
local function note_status(n, name, status)
  local j = index_in(NAMES, n, name)
  if j > n then
    NAMES[j], STATUSES[j] = name, status
    return j
  end
  if STATUSES[j] == 'A' or status == 'D' then
    STATUSES[j] = status
  end
  return n
end

-- Pushes the request's entry into each list the groups noted in this call name, if
-- their recording asks for it: every hit, or only when some policy denied or would
-- have denied. One entry a list, whatever the number of its groups (an enforced and a
-- shadow group of one identity): "<head>|<ms>|<outcome>|<policy>=<A, D or S>,..."
-- (engine/hits.py), the head the first group's. The entry's outcome is the worst of
-- its policies': 'D' denied by an enforced policy, 'S' only a shadow policy would
-- have denied, 'A' allowed. A block names itself ('!blocked'). Called (check) only if
-- an entry may be written: some group was denied, or one records every hit.
local function push_hits()
  local stamp = fmt(now_ms) -- one time for the call's entries
  for p = 0, pending - 1, PENDING_STRIDE do
    local state_key = PENDING[p + 1]
    if not noted_before(PENDING, PENDING_STRIDE, p, state_key) then
      local every, n = false, 0
      for q = p, pending - 1, PENDING_STRIDE do
        if PENDING[q + 1] == state_key then
          local set, at, blocked = PENDING[q + 3], PENDING[q + 4], PENDING[q + 5]
          local no, limits = set.shadow and 'S' or 'D', set.limits
          local named = blocked and '!blocked' or set.policy
          every = every or set.every
          if named then -- the group's limits are one policy's: one outcome for all
            local status = 'A'
            for i = 1, #limits do
              if denies(OUT[at + 4 * i - 3]) then
                status = no
                break
              end
            end
            n = note_status(n, named, status)
          else
            for i = 1, #limits do
              n = note_status(n, limits[i][7], denies(OUT[at + 4 * i - 3]) and no or 'A')
            end
          end
        end
      end
      local outcome = 'A'
      for i = 1, n do
        local status = STATUSES[i]
        if status == 'D' or (status == 'S' and outcome == 'A') then
          outcome = status
        end
        PARTS[i] = NAMES[i] .. '=' .. status
      end
      if every or outcome ~= 'A' then
        local policies = n == 1 and PARTS[1] or tconcat(PARTS, ',', 1, n)
        push_metadata(list_of(state_key),
          head_of(PENDING[p + 2]) .. '|' .. stamp .. '|' .. outcome .. '|' .. policies)
      end
    end
  end
end

-- Parsed arguments kept between calls where Redis keeps the code loaded (a
-- Redis 7 function library; on every call otherwise), by the argument's
-- string: {size, items}, emptied once it holds CACHE_MAX of them. A caller looks its
-- argument up (CACHE.items[text]) and calls the parser only when it is missing: the
-- lookup is a table read, a call about 350 instructions more (prelude.lua).
local CACHE_MAX = 1000
local SETTINGS, SETS = {size = 0, items = {}}, {size = 0, items = {}}

local function remember(cache, text, value)
  if cache.size >= CACHE_MAX then
    cache.items, cache.size = {}, 0
  end
  cache.items[text], cache.size = value, cache.size + 1
  return value
end

-- The call's settings: {charge, cost, metadata cap, metadata ttl, retention, index cap}.
local function parse_settings(text)
  local mode, c, cap, ttl, keep, icap = smatch(text, '^([cp])|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)$')
  return remember(SETTINGS, text, {mode == 'c', tonumber(c), tonumber(cap), tonumber(ttl),
    tonumber(keep), tonumber(icap)})
end

-- A group's limits: {limits = {...}, fields = {HORIZON, OVERRIDE, spec...}, slots = {...},
-- logs = n, width, shadow, overrides, records, every, soft, reserves} (its flags: a
-- shadow group, one an override decides, whether it records hits, all of them, a soft
-- group, one that reserves its attempts in flight; `width` its number of keys). Each limit is
-- {algorithm, limit, window, capacity, policy, spec, the policy's name as a hit
-- entry names it (no '|', ',' or '='), its own cost or nil, the offender record's
-- field counting the policy's denials}; `policy` that name if every limit is of one
-- policy, else false; fields are
-- what the group's HMGET reads, slots[i] where limit i's value is in its reply
-- (sliding logs have none: their ZSETs, `logs` of them, are keys of the group).
local function parse_limits(text)
  local kind, decided, records, refuses = sbyte(text, 1, 4)
  local set = {limits = {}, fields = {HORIZON, OVERRIDE}, slots = {}, logs = 0,
    shadow = kind == 115, overrides = decided == 111, -- 's', 'o'
    records = records ~= 110, every = records == 97, -- not 'n'; 'a'
    soft = refuses == 99, reserves = refuses == 118} -- 'c', 'v'
  local pos = 5
  while pos <= #text do
    local colon = sfind(text, ':', pos, true)
    local size, own = smatch(ssub(text, pos, colon - 1), '^(%d+)%*?(%d*)$')
    local stop = colon + tonumber(size)
    local spec = ssub(text, colon + 1, stop)
    local code, limit, window, capacity, policy =
      smatch(spec, '^(%a+)|(%d+)|(%d+)|(%d+)|(.*)$')
    local named = sgsub(policy, '[|,=]', '_')
    local i = #set.limits + 1
    if i == 1 then
      set.policy = named
    elseif set.policy ~= named then
      set.policy = false
    end
    set.limits[i] = {ALG[code], tonumber(limit), tonumber(window), tonumber(capacity),
      policy, spec, named, tonumber(own), 'd:' .. policy}
    if ALG[code].zset then
      set.logs = set.logs + 1
    else
      set.fields[#set.fields + 1] = spec
      set.slots[i] = #set.fields
    end
    local ban
    ban, pos = ban_at(text, stop + 1)
    if ban then
      add_ban(set, policy, ban)
    end
  end
  set.width = 1 + set.logs + (set.reserves and 1 or 0)
  -- Its HMGET reads a field per limit and two more, its HSET writes two per limit and two.
  set.wide = 2 * #set.limits + 2 > UNPACK_MAX
  return remember(SETS, text, set)
end

-- Decides one identity's group: its keys from KEYS[k] (state, then one per
-- sliding log), its arguments from ARGV[a] (limits, info). Puts four numbers per
-- limit in OUT after its first `n`; returns where the next group starts and how
-- many numbers OUT holds. A soft group (a view's policy whose denial refuses
-- nothing) comes after the call's other groups (the engine orders them, and sends
-- soft groups in a call of their own when a request spans several) and is charged
-- only if none of those that refuse the request was refused: soft limits count the
-- requests that go on.
local function run_group(KEYS, ARGV, a, k, n)
  local set, info = SETS.items[ARGV[a]] or parse_limits(ARGV[a]), ARGV[a + 1]
  local state_key = KEYS[k]
  -- The horizon, the override and every limit held in the HASH: one HMGET.
  local values = set.wide and batched('HMGET', state_key, set.fields, #set.fields, true)
    or rcall('HMGET', state_key, unpack(set.fields))
  local override, override_until = nil, 0
  if set.overrides and values[2] then
    override, override_until = override_of(values[2])
  end
  -- Failed logins in flight, which the limits count beside the request (attempts.lua).
  local extra, reserved, waiting = 0, nil, 0
  if set.reserves and request_id then
    reserved = KEYS[k + set.width - 1]
    extra = in_flight(reserved, now, charge)
  end
  local at, nw, live, logs, refused, lk = n, 0, 0, nil, false, k + 1
  local limits = set.limits
  for i = 1, #limits do -- not ipairs: a C call per step
    local l = limits[i]
    local alg, limit, window, capacity, lcost = l[1], l[2], l[3], l[4], l[8] or cost
    local allowed, remaining, retry, reset, new, lives, waited
    if override == 'a' then
      allowed, remaining, retry, reset = true, limit, 0, 0
    elseif override == 'b' then
      allowed, remaining = false, 0
      retry, reset = override_until - now, override_until - now
    elseif alg.zset then
      allowed, remaining, retry, reset, new =
        alg.peek(KEYS[lk], now, limit, window, capacity, lcost)
      if extra > 0 and allowed then
        allowed, remaining, retry = beside(remaining, extra)
        waited, waiting = not allowed, allowed and waiting or waiting + 1
      end
      if allowed then
        logs = logs or {}
        logs[#logs + 1] = {KEYS[lk], window, new, alg, lcost}
      end
      lk = lk + 1
    else
      allowed, remaining, retry, reset, new, lives =
        alg.peek(values[set.slots[i]] or nil, now, limit, window, capacity, lcost, state_key,
          l[6])
      if extra > 0 and allowed then
        allowed, remaining, retry = beside(remaining, extra)
        waited, waiting = not allowed, allowed and waiting or waiting + 1
      end
      if allowed then
        WRITES[nw + 1], WRITES[nw + 2], nw = l[6], new, nw + 2
        if lives > live then
          live = lives
        end
      end
    end
    OUT[n + 1] = allowed and 1 or (override == 'b' and 2 or (waited and 3 or 0))
    OUT[n + 2], OUT[n + 3], OUT[n + 4] = remaining, retry, reset
    n = n + 4
    refused = refused or not allowed
  end
  if reserved and not charge and cost > 0 then
    note_place(reserved, refused)
  end
  -- A soft group after a refusal is only looked at, as the soft round of a cluster
  -- peeks it: the request does not go on, so it is neither charged nor a denial.
  -- A login's look that refuses it is recorded as the charge of a refused request is
  -- (attempts.lua): the refusal is a denial, though nothing is charged; not one refused
  -- only for the attempts in flight.
  local recorded = charge or (refused and set.reserves and
    (waiting == 0 or not held_back(limits, at)))
  if recorded and not (set.soft and refusing > 0) then
    if not refused then
      commit(state_key, WRITES, nw, live, values[1], logs, set.wide)
    else
      if not set.soft and not set.shadow then
        refusing = refusing + 1
      end
      note_denial(state_key, info, set, at, override == 'b')
      if set.bans and override == nil and not set.shadow and set.overrides then
        note_ban(state_key, label_of(info), set, values, denied_policies(limits, at), now)
      end
    end
    if set.records then
      PENDING[pending + 1], PENDING[pending + 2], PENDING[pending + 3] = state_key, info, set
      PENDING[pending + 4], PENDING[pending + 5] = at, override == 'b'
      pending, pending_every = pending + PENDING_STRIDE, pending_every or set.every
    end
  end
  return a + 2, k + set.width, n
end

-- A gate's header "<budget>|<window_us>|<shape>": {budget, window, whether a
-- fallback group follows, whether the identity's own group follows}.
local GATES = {size = 0, items = {}}
local function parse_gate(text)
  local budget, window, shape = smatch(text, '^(%d+)|(%d+)|([0-3])$')
  return remember(GATES, text, {budget + 0, window + 0, shape == '1' or shape == '2',
    shape == '2' or shape == '3'})
end

-- Where the group at ARGV[a], KEYS[k] ends, without deciding it. A charge gives back
-- the place a login's look took in a group it skips (attempts.lua).
local function skip_group(KEYS, ARGV, a, k)
  local set = SETS.items[ARGV[a]] or parse_limits(ARGV[a])
  if set.reserves and charge and request_id then
    rcall('ZREM', KEYS[k + set.width - 1], request_id)
  end
  return a + 2, k + set.width
end

-- A client's identity budget (a ZSET: member = an identity's digest, score =
-- when it last took or renewed its place): whether `member` passes, i.e. its
-- time is within the window or fewer than `budget` others' are. Charging, a
-- new member's time is written, members older than the window dropped first,
-- and a passing member's time renewed once it is an eighth of the window old
-- (not on every request: a busy identity's ZADD and PEXPIRE are skipped, and
-- its place is given back between 7/8 of a window and a window after its last
-- request). The ZSET never holds more than `budget` members, and lives one
-- window after the last time written.
local function pass_gate(key, member, budget, window)
  local cutoff = now - window
  local seen = tonumber(rcall('ZSCORE', key, member))
  local passed = seen ~= nil and seen > cutoff
  if not passed then
    local held
    if charge then
      rcall('ZREMRANGEBYSCORE', key, '-inf', fmt(cutoff))
      held = rcall('ZCARD', key)
    else
      held = rcall('ZCOUNT', key, '(' .. fmt(cutoff), '+inf')
    end
    passed = held < budget
  end
  if passed and charge and (seen == nil or (now - seen) * 8 >= window) then
    rcall('ZADD', key, fmt(now), member)
    expire_in(key, window)
  end
  return passed
end

-- The entry point: the script's body ends with `return check(KEYS, ARGV)`;
-- on Redis 7 the same code is a function library that registers it.
--
-- The entries follow the settings: each is a group (run_group), or a gated
-- group: 'g', "<budget>|<window_us>|<shape>", member, then the groups its shape
-- names (parse_gate). Shape 2: the client IP's group (the fallback), then the
-- identity's: the gate's verdict (1 or 0) decides which one runs; the other is
-- skipped, unread and unwritten. Shape 1: only the fallback: it runs if the gate
-- refuses; if the gate lets the identity through, Python sends the identity's
-- group in a second call (its keys live in another slot of a cluster). Shapes 3
-- and 0 are 2 and 1 without the fallback: the call's own group of the IP already
-- counts every limit it would, so a refused identity counts nowhere else.
local function check(KEYS, ARGV)
  if not rcall then
    bind()
  end
  local a = 2
  if sbyte(ARGV[1], 1) <= 57 then -- a digit: a test clock's time, then the settings
    now, a = ARGV[1] + 0, 3
    TTL_EXTRA_MS = 60000
  else
    -- TIME's reply is digits: read by arithmetic (prelude.lua).
    local t = rcall('TIME')
    now = t[1] * 1000000 + t[2]
    TTL_EXTRA_MS = 0
  end
  local conf = SETTINGS.items[ARGV[a - 1]] or parse_settings(ARGV[a - 1])
  charge, cost, meta_cap, meta_ttl, retention, index_cap =
    conf[1], conf[2], conf[3], conf[4], conf[5], conf[6]
  now_ms = floor(now / 1000)
  denied, refusing = 0, 0
  placing, placed_all = 0, true
  pending, pending_every = 0, false
  OUT[1] = now
  local n = 1
  local k, last = 1, #ARGV
  request_id = nil
  if ARGV[a] == 'r' then
    request_id, a = ARGV[a + 1], a + 2
  end
  while a <= last do
    if ARGV[a] ~= 'g' then
      a, k, n = run_group(KEYS, ARGV, a, k, n)
    else
      local gate = GATES.items[ARGV[a + 1]] or parse_gate(ARGV[a + 1])
      local passed = pass_gate(KEYS[k], ARGV[a + 2], gate[1], gate[2])
      local fallback, own = gate[3], gate[4]
      OUT[n + 1], n = passed and 1 or 0, n + 1
      a, k = a + 3, k + 1
      if passed then
        if fallback then
          a, k = skip_group(KEYS, ARGV, a, k)
        end
        if own then
          a, k, n = run_group(KEYS, ARGV, a, k, n)
        end
      else
        if fallback then
          a, k, n = run_group(KEYS, ARGV, a, k, n)
        end
        if own then
          a, k = skip_group(KEYS, ARGV, a, k)
        end
      end
    end
  end
  if denied > 0 then
    record_denials()
  end
  if pending > 0 and (denied > 0 or pending_every) then
    push_hits()
  end
  if placing > 0 then -- a login's look (attempts.lua)
    take_places(now)
  end
  if n <= UNPACK_MAX then
    return spack(PACKINGS[n] or packing(n), unpack(OUT, 1, n))
  end
  local parts = {}
  for i = 1, n, UNPACK_MAX do
    local j = min(n, i + UNPACK_MAX - 1)
    parts[#parts + 1] = spack(packing(j - i + 1), unpack(OUT, i, j))
  end
  return tconcat(parts)
end
