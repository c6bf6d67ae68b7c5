-- Sliding window of sub-interval counters: SW_BUCKETS buckets per window,
-- stored as "<bucket> <count>" pairs, oldest first. The count covers the
-- current bucket and the SW_BUCKETS before it: a span of at least one
-- window, so it never admits more than the limit in any window, and at most
-- one bucket (window / SW_BUCKETS) of requests fewer than the exact sliding
-- log. Buckets that slid out are dropped on the next write.
ALG.sw = {}
local SW_BUCKETS = 10

function ALG.sw.peek(v, now, limit, window, capacity, cost)
  local step = window / SW_BUCKETS
  local b = floor(now / step)
  local oldest = b - SW_BUCKETS
  local live, total, newest = {}, 0, nil
  if v then
    for si, sc in sgmatch(v, '(%d+) (%d+)') do
      local idx, c = tonumber(si), tonumber(sc)
      if idx >= oldest then
        live[#live + 1] = {idx, c}
        total = total + c
        if c > 0 and (newest == nil or idx > newest) then
          newest = idx
        end
      end
    end
  end
  if total + cost <= limit then
    if cost > 0 and (newest == nil or b > newest) then
      newest = b
    end
    local reset = newest and ((newest + SW_BUCKETS + 1) * step - now) or 0
    local parts, charged = {}, false
    for _, e in ipairs(live) do
      local c = e[2]
      if e[1] == b then
        c, charged = c + cost, true
      end
      parts[#parts + 1] = fmt(e[1]) .. ' ' .. fmt(c)
    end
    if not charged then
      parts[#parts + 1] = fmt(b) .. ' ' .. fmt(cost)
    end
    return true, limit - total - cost, 0, reset, tconcat(parts, ' '),
      (b + SW_BUCKETS + 1) * step - now
  end
  local reset = (newest + SW_BUCKETS + 1) * step - now
  -- Retry when the oldest buckets have slid out far enough to fit the cost.
  tsort(live, function(x, y) return x[1] < y[1] end)
  local need, freed, retry = total + cost - limit, 0, reset
  for _, e in ipairs(live) do
    freed = freed + e[2]
    if freed >= need then
      retry = (e[1] + SW_BUCKETS + 1) * step - now
      break
    end
  end
  return false, max(0, limit - total), retry, reset
end
