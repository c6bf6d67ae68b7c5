-- GCRA, the leaky bucket as a meter: one value, the theoretical arrival time
-- (TAT) of the next request. Emission interval T = window / limit, rounded up
-- to a whole microsecond; `capacity` requests may arrive back to back. A request
-- that costs more than `capacity` (at most the limit: costs.py) passes only when
-- the bucket is full, and leaves it in debt: nothing passes until it has drained
-- its whole cost.
ALG.gcra = {}

function ALG.gcra.peek(v, now, limit, window, capacity, cost)
  local interval = ceil(window / limit)
  local tolerance = interval * capacity
  local tat = v and tonumber(v) or now
  if tat < now then
    tat = now
  end
  local new_tat = tat + cost * interval
  local allow_at = cost > capacity and tat or new_tat - tolerance
  if now >= allow_at then
    local left = floor((tolerance - (new_tat - now)) / interval)
    return true, left > 0 and left or 0, 0, new_tat - now, sformat('%d', new_tat), new_tat - now
  end
  return false, max(0, floor((tolerance - (tat - now)) / interval)), allow_at - now,
    tat - now
end
