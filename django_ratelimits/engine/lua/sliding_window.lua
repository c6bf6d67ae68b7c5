-- Sliding window of sub-interval counters: a HASH of bucket index -> count,
-- SW_BUCKETS buckets per window. The count covers the current bucket and the
-- SW_BUCKETS before it: a span of at least one window, so it never admits
-- more than the limit in any window, and at most one bucket
-- (window / SW_BUCKETS) of requests fewer than the exact sliding log.
ALG.sw = {}
local SW_BUCKETS = 10

function ALG.sw.peek(key, now, limit, window, capacity, cost)
  local step = window / SW_BUCKETS
  local b = floor(now / step)
  local oldest = b - SW_BUCKETS
  local flat = redis.call('HGETALL', key)
  local live, stale, total, newest = {}, {}, 0, nil
  for i = 1, #flat, 2 do
    local idx = tonumber(flat[i])
    if idx < oldest then
      stale[#stale + 1] = flat[i]
    else
      local c = tonumber(flat[i + 1])
      live[#live + 1] = {idx, c}
      total = total + c
      if c > 0 and (newest == nil or idx > newest) then
        newest = idx
      end
    end
  end
  local state = {b, stale}
  if total + cost <= limit then
    if cost > 0 and (newest == nil or b > newest) then
      newest = b
    end
    local reset = newest and ((newest + SW_BUCKETS + 1) * step - now) or 0
    return true, limit - total - cost, 0, reset, state
  end
  local reset = (newest + SW_BUCKETS + 1) * step - now
  -- Retry when the oldest buckets have slid out far enough to fit the cost.
  table.sort(live, function(x, y) return x[1] < y[1] end)
  local need, freed, retry = total + cost - limit, 0, reset
  for _, e in ipairs(live) do
    freed = freed + e[2]
    if freed >= need then
      retry = (e[1] + SW_BUCKETS + 1) * step - now
      break
    end
  end
  return false, max(0, limit - total), retry, reset, state
end

function ALG.sw.commit(key, now, limit, window, capacity, cost, state)
  local b, stale = state[1], state[2]
  redis.call('HINCRBY', key, b, cost)
  if #stale > 0 then
    redis.call('HDEL', key, unpack(stale))
  end
  expire_in(key, (b + SW_BUCKETS + 1) * (window / SW_BUCKETS) - now)
end
