-- Sliding window counter: the current and the previous fixed window's counts,
-- the previous one weighted by how much of it still overlaps the sliding
-- window ("<w> <current> <previous>"). O(1) memory; an approximation of the
-- sliding log.
ALG.swc = {}

local function swc_estimate(prev, cur, window, elapsed)
  return cur + floor(prev * ((window - elapsed) / window))
end

-- First elapsed time (us into the window, >= from) at which
-- swc_estimate(prev, cur, ...) + cost <= limit. Solves the inequality, then
-- steps forward over the last microseconds of float rounding.
local function swc_first_fit(prev, cur, window, limit, cost, from)
  local room = limit - cost - cur
  local e = from
  if prev > 0 then
    e = max(from, floor(window - (room + 1) * window / prev) + 1)
  end
  while e < window and swc_estimate(prev, cur, window, e) + cost > limit do
    e = e + 1
  end
  return min(e, window)
end

function ALG.swc.peek(v, now, limit, window, capacity, cost)
  local w = floor(now / window)
  -- The counts, and the text of the window and of the previous count as read, which
  -- the next value keeps: only the current count is written anew.
  local cur, prev, w_text, prev_text = 0, 0, nil, '0'
  if v then
    local sw, sc, sp = smatch(v, '^(%d+) (%d+) (%d+)$')
    -- Digits, or nil: arithmetic reads them once, tonumber() twice.
    local at = sw and sw + 0
    if at == w then
      cur, prev, w_text, prev_text = sc + 0, sp + 0, sw, sp
    elseif at == w - 1 then
      prev, prev_text = sc + 0, sc
    end
  end
  local start = w * window
  local elapsed = now - start
  local est = swc_estimate(prev, cur, window, elapsed)
  local function reset_for(c)
    if c > 0 then return start + 2 * window - now end
    if prev > 0 then return start + window - now end
    return 0
  end
  if est + cost <= limit then
    return true, limit - est - cost, 0, reset_for(cur + cost),
      (w_text or sformat('%d', w)) .. sformat(' %d ', cur + cost) .. prev_text, (w + 2) * window - now
  end
  local retry
  if cur + cost <= limit then
    retry = start + swc_first_fit(prev, cur, window, limit, cost, elapsed) - now
  else
    -- Not in this window: in the next one the current count becomes `prev`.
    retry = start + window + swc_first_fit(cur, 0, window, limit, cost, 0) - now
  end
  return false, max(0, limit - est), retry, reset_for(cur)
end
