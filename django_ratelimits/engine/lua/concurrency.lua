-- Concurrency: at most `limit` requests of an identity in flight at once
-- (Stripe's concurrent-request limiter). A ZSET of its own (ALG.cc.zset) holds
-- one member per request in flight, its request id, scored by the end of its
-- lease (now + `lease`, the spec's window). The request's slot is released by
-- the release script when its response ends (concurrency.py); a slot whose
-- worker died is dropped once its lease has ended, so no slot leaks for longer
-- than a lease. A request takes one slot whatever its cost; a peek (cost 0)
-- takes none.
ALG.cc = {zset = true}

-- Set by check.lua on every call: the request's id (ARGV 'r' entry), or nil.
local request_id
-- A concurrency denial has no natural reset: this is its Retry-After.
local CONCURRENCY_RETRY_US = 1000000

-- The request's slot is counted with the slots whose lease has not ended.
function ALG.cc.peek(key, now, limit, lease, capacity, cost)
  local held = rcall('ZCOUNT', key, sformat('(%d', now), '+inf')
  local take = min(cost, 1)
  if held + take <= limit then
    return true, limit - held - take, 0, (held + take > 0) and lease or 0, held
  end
  return false, max(0, limit - held), CONCURRENCY_RETRY_US, lease, nil
end

-- Slots whose lease ended leave first, so the ZSET never holds more than
-- `limit` members, and lives one lease after its newest.
function ALG.cc.commit(key, now, lease, cost, held)
  rcall('ZREMRANGEBYSCORE', key, '-inf', fmt(now))
  rcall('ZADD', key, fmt(now + lease), request_id)
  expire_in(key, lease)
end
