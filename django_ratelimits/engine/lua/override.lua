-- Overrides (engine/overrides.py): an identity's block or allow-listing is the
-- OVERRIDE field of its state HASH, "<b or a>:<until_us>"; beside it, a note of
-- who set it and when ("P:{sN}:xn:<ident>", JSON: overrides.Note), which lives
-- as long, and the ident in its shard's override index ("P:{sN}:xs", scored by
-- when it ends, ms), from which staff list them without scanning keys. Staff's
-- blocks and allow-listings (controls.py, through script.OVERRIDE) and a
-- policy's ban (ban.lua) are all written here.

-- Sets the override of the identity whose state HASH is `state_key` to `marker`
-- until `until_us` (`now_us` now), noted `note`. The HASH lives at least until
-- then: its TTL is extended, never shortened, as its horizon (HORIZON, ms) says;
-- `horizon` is that field's value when the caller has read it (nil: read here).
-- Returns the horizon it leaves.
local function set_override(state_key, marker, until_us, note, now_us, horizon)
  local tag, ident = who_of(state_key)
  local until_ms = floor(until_us / 1000)
  local ttl = fmt(ceil((until_us - now_us) / 1000) + TTL_EXTRA_MS)
  horizon = horizon or tonumber(rcall('HGET', state_key, HORIZON)) or 0
  if horizon < until_ms then
    horizon = until_ms
    rcall('HSET', state_key, OVERRIDE, marker, HORIZON, fmt(until_ms))
    rcall('PEXPIRE', state_key, ttl)
  else
    rcall('HSET', state_key, OVERRIDE, marker)
  end
  rcall('SET', tag .. ':xn:' .. ident, note, 'PX', ttl)
  local index = tag .. ':xs'
  rcall('ZREMRANGEBYSCORE', index, '-inf', fmt(floor(now_us / 1000)))
  rcall('ZADD', index, fmt(until_ms), ident)
  -- The index lives as long as the longest override it holds, no longer: an ended
  -- one's entry names its identity until the next write here trims it, or until the
  -- index expires (a fixed year would keep it that long in a quiet shard).
  if rcall('PTTL', index) < tonumber(ttl) then
    rcall('PEXPIRE', index, ttl)
  end
  return horizon
end
