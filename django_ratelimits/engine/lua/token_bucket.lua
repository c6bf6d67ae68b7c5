-- Token bucket: `capacity` tokens, refilled continuously at limit/window
-- ("<tokens> <last refill>"). Tokens are doubles, written with all their
-- digits (fmt_float), so the state round-trips exactly.
ALG.tb = {}

function ALG.tb.peek(v, now, limit, window, capacity, cost)
  local tokens, ts = capacity, nil
  if v then
    local st, sts = smatch(v, '^(%S+) (%d+)$')
    tokens, ts = tonumber(st), tonumber(sts)
    if now > ts then
      tokens = min(capacity, tokens + (now - ts) * limit / window)
    end
  else
    ts = now
  end
  local stamp = max(ts, now)
  if tokens >= cost then
    local left = tokens - cost
    local full_in = ceil((capacity - left) * window / limit)
    return true, floor(left), 0, full_in, fmt_float(left) .. ' ' .. fmt(stamp), full_in
  end
  return false, floor(tokens), ceil((cost - tokens) * window / limit),
    ceil((capacity - tokens) * window / limit)
end
