-- GCRA, the leaky bucket as a meter: one value, the theoretical arrival time
-- (TAT) of the next request. Emission interval T = window / limit, rounded up
-- to a whole microsecond; `capacity` requests may arrive back to back.
ALG.gcra = {}

function ALG.gcra.peek(key, now, limit, window, capacity, cost)
  local interval = ceil(window / limit)
  local tolerance = interval * capacity
  local tat = max(tonumber(redis.call('GET', key)) or now, now)
  local new_tat = tat + cost * interval
  local allow_at = new_tat - tolerance
  if now >= allow_at then
    return true, floor((tolerance - (new_tat - now)) / interval), 0, new_tat - now, new_tat
  end
  return false, max(0, floor((tolerance - (tat - now)) / interval)), allow_at - now,
    tat - now, nil
end

function ALG.gcra.commit(key, now, limit, window, capacity, cost, new_tat)
  redis.call('SET', key, new_tat, 'PX', max(1, ceil((new_tat - now) / 1000)) + TTL_EXTRA_MS)
end
