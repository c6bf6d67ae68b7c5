-- Token bucket: `capacity` tokens, refilled continuously at limit/window
-- (HASH t = tokens, ts = last refill). Tokens are doubles: Redis stores a
-- number argument with all its digits, so the state round-trips exactly.
ALG.tb = {}

function ALG.tb.peek(key, now, limit, window, capacity, cost)
  local v = redis.call('HMGET', key, 't', 'ts')
  local tokens, ts = capacity, tonumber(v[2])
  if ts then
    tokens = tonumber(v[1])
    if now > ts then
      tokens = min(capacity, tokens + (now - ts) * limit / window)
    end
  else
    ts = now
  end
  local stamp = max(ts, now)
  if tokens >= cost then
    local left = tokens - cost
    return true, floor(left), 0, ceil((capacity - left) * window / limit), {left, stamp}
  end
  return false, floor(tokens), ceil((cost - tokens) * window / limit),
    ceil((capacity - tokens) * window / limit), nil
end

function ALG.tb.commit(key, now, limit, window, capacity, cost, state)
  redis.call('HSET', key, 't', state[1], 'ts', state[2])
  expire_in(key, ceil((capacity - state[1]) * window / limit))
end
