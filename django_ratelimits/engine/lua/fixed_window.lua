-- Fixed window: one counter per window aligned to the epoch, stored with the
-- window's index ("<w> <n>") so a stale counter is never read as current.
ALG.fw = {}

function ALG.fw.peek(v, now, limit, window, capacity, cost)
  local w = floor(now / window)
  local n, w_text = 0, nil -- the window's text as read, which the next value keeps
  if v then
    local sw, sn = smatch(v, '^(%d+) (%d+)$')
    -- Digits, or nil: arithmetic reads them once, tonumber() twice.
    if sw and sw + 0 == w then
      n, w_text = sn + 0, sw
    end
  end
  local window_end = (w + 1) * window - now
  if n + cost <= limit then
    local after = n + cost
    return true, limit - after, 0, (after > 0) and window_end or 0,
      (w_text or sformat('%d', w)) .. sformat(' %d', after), window_end
  end
  return false, max(0, limit - n), window_end, window_end
end
