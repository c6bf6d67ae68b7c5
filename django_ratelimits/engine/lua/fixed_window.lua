-- Fixed window: one counter per window aligned to the epoch, stored with the
-- window's index (HASH w, n) so a stale counter is never read as current.
ALG.fw = {}

function ALG.fw.peek(key, now, limit, window, capacity, cost)
  local w = floor(now / window)
  local v = redis.call('HMGET', key, 'w', 'n')
  local n = 0
  if tonumber(v[1]) == w then
    n = tonumber(v[2])
  end
  local window_end = (w + 1) * window - now
  if n + cost <= limit then
    local after = n + cost
    return true, limit - after, 0, (after > 0) and window_end or 0, {w, after}
  end
  return false, max(0, limit - n), window_end, window_end, nil
end

function ALG.fw.commit(key, now, limit, window, capacity, cost, state)
  redis.call('HSET', key, 'w', state[1], 'n', state[2])
  expire_in(key, (state[1] + 1) * window - now)
end
