-- Sliding window of sub-interval counters: SW_BUCKETS buckets per window,
-- stored as "<bucket> <count>" pairs, oldest first. The count covers the
-- current bucket and the SW_BUCKETS before it: a span of at least one
-- window, so it never admits more than the limit in any window, and at most
-- one bucket (window / SW_BUCKETS) of requests fewer than the exact sliding
-- log. Buckets that slid out are dropped on the next write.
ALG.sw = {}
local SW_BUCKETS = 10

-- The live buckets of the value being read, in the text's order: indexes and counts,
-- SW_N of them. Tables made at the first sliding window's check and kept between calls
-- where Redis keeps the code loaded (see OUT in check.lua): no table per bucket.
local SW_IDX, SW_CNT, SW_N

function ALG.sw.peek(v, now, limit, window, capacity, cost)
  local step = window / SW_BUCKETS
  local b = floor(now / step)
  local oldest = b - SW_BUCKETS
  local total, newest = 0, nil
  -- One pass over the text: the live buckets, their total, the newest that counts,
  -- where the live pairs start (`from`) and where the last one starts and ends; and
  -- whether the indexes rise throughout, as this script writes them (oldest first),
  -- so that the live pairs are the text's tail.
  local from, last_at, last_end, previous, rising = nil, 0, 0, nil, true
  if SW_IDX == nil then
    SW_IDX, SW_CNT = {}, {}
  end
  SW_N = 0
  if v then
    local pos = 1
    while true do
      local at, stop, si, sc = sfind(v, '(%d+) (%d+)', pos)
      if at == nil then
        break
      end
      pos = stop + 1
      local idx = si + 0 -- digits: arithmetic reads them once, tonumber() twice
      rising = rising and (previous == nil or idx > previous)
      previous = idx
      if idx >= oldest then
        local c = sc + 0
        total = total + c
        if c > 0 and (newest == nil or idx > newest) then
          newest = idx
        end
        SW_N = SW_N + 1
        SW_IDX[SW_N], SW_CNT[SW_N] = idx, c
        from = from or at
        last_at, last_end = at, stop
      end
    end
  end
  local n, last = SW_N, SW_IDX[SW_N]
  if total + cost <= limit then
    if cost > 0 and (newest == nil or b > newest) then
      newest = b
    end
    local reset = newest and ((newest + SW_BUCKETS + 1) * step - now) or 0
    -- The next value keeps the live pairs' text as it is (no number written anew
    -- but the charged bucket's); written whole, every pair anew, only when the text
    -- is out of order or a bucket lies ahead of `b` (the clock went back).
    local value
    if n == 0 then
      value = fmt(b) .. ' ' .. fmt(cost)
    elseif not rising or last > b then
      local parts, charged = {}, false
      for i = 1, n do
        local c = SW_CNT[i]
        if SW_IDX[i] == b then
          c, charged = c + cost, true
        end
        parts[i] = fmt(SW_IDX[i]) .. ' ' .. fmt(c)
      end
      if not charged then
        parts[n + 1] = fmt(b) .. ' ' .. fmt(cost)
      end
      value = tconcat(parts, ' ')
    elseif last == b then
      value = ssub(v, from, last_at - 1) .. fmt(b) .. ' ' .. fmt(SW_CNT[n] + cost)
    else
      value = ssub(v, from, last_end) .. ' ' .. fmt(b) .. ' ' .. fmt(cost)
    end
    return true, limit - total - cost, 0, reset, value, (b + SW_BUCKETS + 1) * step - now
  end
  local reset = (newest + SW_BUCKETS + 1) * step - now
  -- Retry when the oldest buckets have slid out far enough to fit the cost: the
  -- buckets by index, which the text's order is when it rises.
  local order = nil
  if not rising then
    order = {}
    for i = 1, n do
      order[i] = i
    end
    tsort(order, function(x, y) return SW_IDX[x] < SW_IDX[y] end)
  end
  local need, freed, retry = total + cost - limit, 0, reset
  for k = 1, n do
    local i = order and order[k] or k
    freed = freed + SW_CNT[i]
    if freed >= need then
      retry = (SW_IDX[i] + SW_BUCKETS + 1) * step - now
      break
    end
  end
  return false, max(0, limit - total), retry, reset
end
