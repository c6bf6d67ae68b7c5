-- Escalating bans (fail2ban's): a policy's limit may carry a ban, framed
-- after its spec as "!<after>|<within_us>|<for_us>|<max_us>;" (limits.py,
-- Ban.encoded). Its state is one field of the identity's state HASH,
-- "!ban|<policy>" (never a spec, which starts with an algorithm's code):
-- "<level>:<forget_us>:<t1>,<t2>,...", the level of the last ban, until when
-- that level counts, and the times of the policy's denials within the window
-- (at most `after` of them). The field is read by the group's HMGET with the
-- limits and written only on a denial: an allowed request costs a ban nothing.
--
-- The `after`-th denial within `within` blocks the identity: the override
-- field (OVERRIDE, engine/overrides.py) becomes "b:<until_us>", exactly what
-- staff's block writes, with a note saying it was the ban and its level, and
-- the ident in the shard's override index: the dashboard and the command list
-- and lift it like a block. A ban lasts `for` * 2^(level - 1), at most `max`;
-- the level is forgotten `max` after the ban ends if no ban follows.

local BAN_FIELD = '!ban|'
local BAN_LEVEL_MAX = 64
local json_encode

-- The ban framed at `pos` of a group's limits, or nil; where the next limit starts.
local function ban_at(text, pos)
  if sbyte(text, pos) ~= 33 then -- '!'
    return nil, pos
  end
  local stop = sfind(text, ';', pos, true)
  local after, within, length, most =
    smatch(ssub(text, pos + 1, stop - 1), '^(%d+)|(%d+)|(%d+)|(%d+)$')
  return {after = tonumber(after), within = tonumber(within), length = tonumber(length),
    most = tonumber(most)}, stop + 1
end

-- Adds the ban of `policy` to a group's limits `set` (once per policy): its
-- field is read with the limits, at set.fields[ban.slot].
local function add_ban(set, policy, ban)
  set.bans = set.bans or {}
  for _, b in ipairs(set.bans) do
    if b.policy == policy then
      return
    end
  end
  ban.policy, ban.field = policy, BAN_FIELD .. policy
  set.fields[#set.fields + 1] = ban.field
  ban.slot = #set.fields
  set.bans[#set.bans + 1] = ban
end

-- Blocks the identity until `until_us` as staff's block does (override.lua),
-- with a note naming the ban's policy and level; `horizon` is the state HASH's
-- (read with the limits). Returns the horizon the block leaves.
local function impose(state_key, label, ban, level, until_us, now_us, horizon)
  json_encode = json_encode or cjson.encode
  local note = json_encode({label = label, by = 'ban', at = fmt(now_us), ban = level,
    policy = ban.policy})
  return set_override(state_key, 'b:' .. fmt(until_us), until_us, note, now_us, horizon)
end

-- Counts a denial of an identity's group towards the bans of the `denied`
-- policies (`values`: the group's HMGET reply, `horizon` its values[1]),
-- banning where one reaches its count. Returns nothing; writes the ban fields.
local function note_ban(state_key, label, set, values, denied, now_us)
  local horizon = tonumber(values[1]) or 0
  for _, ban in ipairs(set.bans) do
    if denied[ban.policy] then
      local level, forget, log = smatch(values[ban.slot] or '', '^(%d+):(%d+):([%d,]*)$')
      level, forget = tonumber(level) or 0, tonumber(forget) or 0
      if forget <= now_us then
        level, forget = 0, 0
      end
      -- At most after - 1 times are kept (a ban empties them): bounded by MAX_BAN_AFTER.
      local times, cutoff = {}, now_us - ban.within
      for t in sgmatch(log or '', '%d+') do
        if tonumber(t) > cutoff then
          times[#times + 1] = t
        end
      end
      times[#times + 1] = fmt(now_us)
      local keep = now_us + ban.within
      if #times >= ban.after then
        level = min(level + 1, BAN_LEVEL_MAX)
        local until_us = now_us + min(ban.length * 2 ^ (min(level, 60) - 1), ban.most)
        forget = until_us + ban.most
        keep, times = forget, {}
        horizon = impose(state_key, label, ban, level, until_us, now_us, horizon)
      end
      local value = sformat('%d:%d:%s', level, forget, tconcat(times, ','))
      local keep_ms = ceil(max(keep, forget) / 1000)
      if horizon < keep_ms then
        -- A quarter of the window more, so that the next denials find it long enough.
        horizon = keep_ms + ceil(ban.within / 4000)
        rcall('HSET', state_key, ban.field, value, HORIZON, fmt(horizon))
        rcall('PEXPIRE', state_key, fmt(horizon - floor(now_us / 1000) + TTL_EXTRA_MS))
      else
        rcall('HSET', state_key, ban.field, value)
      end
    end
  end
end
