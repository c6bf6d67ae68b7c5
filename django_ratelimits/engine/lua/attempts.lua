-- Failed logins in flight (logins.py). A failed-login policy charges a failure once
-- its password was checked, and looks at the count before the password: logins sent
-- together would all pass a look made before any of them failed. So a group that
-- reserves (its fourth flag 'v') keeps the attempts in flight in a ZSET of its own
-- (keys.py: "P:{sN}:v:<ident>", after the group's sliding logs), one member per
-- request id (the call's 'r'), scored by the end of its lease:
--
-- * a look (peek) passes only if the request fits beside every attempt in flight,
--   and then reserves its place: in every group of the call, or in none if one of
--   them refuses it. A look that refuses the login takes no place and charges
--   nothing; refused by a limit on its own, it is recorded as a denial, as a refused
--   charge is (run_group in check.lua), so a refused login costs one call. Refused
--   only for the attempts in flight, it is no denial (nor a step towards a ban):
--   those may yet succeed;
-- * a charge (the failure, which happened) takes the place its look reserved and
--   counts the failure as any charge does, beside no attempt in flight: room was kept
--   for it. A group the charge skips (a gate that now counts the address instead)
--   gives its place back too (skip_group).
-- * the request's end gives its place back (the release script, concurrency.py),
--   and a lease that ends frees the place of a worker that died.
--
-- So the failures counted plus the attempts in flight never pass the limit.
local RESERVE_LEASE_US = 60000000
-- A request refused only for the attempts in flight is told to try again soon:
-- they may yet succeed, and free their places.
local RESERVED_RETRY_US = 1000000

-- How many attempts in flight a group's limits must count beside the request's own:
-- in a look, every live one; a charge gives the request's place back and counts none.
local function in_flight(key, now, charging)
  if charging then
    rcall('ZREM', key, request_id)
    return 0
  end
  return rcall('ZCOUNT', key, sformat('(%d', now), '+inf')
end

-- A limit's answer for the request when it allowed the request's own cost with
-- `remaining` left: whether `extra` attempts in flight fit too, and what is left.
local function beside(remaining, extra)
  if remaining >= extra then
    return true, remaining - extra, 0
  end
  return false, 0, RESERVED_RETRY_US
end

-- The places a look may take, `placing` of them in PLACES (kept between calls and
-- overwritten), and whether every group of the call that reserves passed.
local PLACES = {}
local placing, placed_all

-- Notes that a look's group would take its place in `key`, unless it was `refused`.
local function note_place(key, refused)
  placing = placing + 1
  PLACES[placing] = key
  placed_all = placed_all and not refused
end

-- Takes the places the call's groups noted, if none of them refused the request
-- (places whose lease ended leave first).
local function take_places(now)
  if not placed_all then
    return
  end
  for i = 1, placing do
    local key = PLACES[i]
    rcall('ZREMRANGEBYSCORE', key, '-inf', fmt(now))
    rcall('ZADD', key, fmt(now + RESERVE_LEASE_US), request_id)
    expire_in(key, RESERVE_LEASE_US)
  end
end
