-- Token bucket: `capacity` tokens, refilled continuously at limit/window
-- ("<tokens> <last refill>"). Tokens are doubles, written with all their
-- digits (fmt_float), so the state round-trips exactly. A request that costs more
-- than `capacity` (at most the limit: costs.py) passes only when the bucket is full,
-- and leaves it in debt (fewer than no tokens) until its whole cost has refilled.
ALG.tb = {}

function ALG.tb.peek(v, now, limit, window, capacity, cost)
  local tokens, ts = capacity, now
  -- No value, or one that is not "<tokens> <stamp>" (written by hand): a full bucket.
  local st, sts
  if v then
    st, sts = smatch(v, '^(%S+) (%d+)$')
  end
  local read = tonumber(st)
  if read then
    tokens, ts = read, sts + 0
    if now > ts then
      tokens = min(capacity, tokens + (now - ts) * limit / window)
    end
  end
  local stamp = max(ts, now)
  local need = cost > capacity and capacity or cost
  if tokens >= need then
    local left = tokens - cost
    local full_in = ceil((capacity - left) * window / limit)
    return true, left > 0 and floor(left) or 0, 0, full_in,
      sformat('%.17g %d', left, stamp), full_in
  end
  return false, tokens > 0 and floor(tokens) or 0, ceil((need - tokens) * window / limit),
    ceil((capacity - tokens) * window / limit)
end
