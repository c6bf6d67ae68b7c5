-- Sliding window of sub-interval counters: SW_BUCKETS buckets per window,
-- stored as "<bucket> <count>" pairs, oldest first. The count covers the
-- current bucket and the SW_BUCKETS before it: a span of at least one
-- window, so it never admits more than the limit in any window, and at most
-- one bucket (window / SW_BUCKETS) of requests fewer than the exact sliding
-- log. Buckets that slid out are dropped on the next write.
ALG.sw = {}
local SW_BUCKETS = 10

-- The live buckets of the value being read, in the text's order: indexes, counts and
-- where each pair starts in the text, SW_N of them. Tables made at the first sliding
-- window's check and kept between calls where Redis keeps the code loaded (see OUT in
-- check.lua): no table per bucket.
local SW_IDX, SW_CNT, SW_AT, SW_N

-- Readings kept between calls where Redis keeps the code loaded (KEPT). A busy
-- identity's value holds up to 11 pairs, and reading them from the text costs a pattern
-- match and two conversions each, on every request. So the script keeps, by state key
-- and field, what it read of a busy identity's value of at least SW_KEEP_MIN live
-- pairs, rising and counting more than 0 each (as the script writes them): a reading,
-- its text, its pairs from slot `h` to slot `t` (3 slots a pair: index, count, and
-- where the pair starts in the text plus `base`), their `total`, and `cut`, the oldest
-- live bucket when pairs were last left out (a clock that goes back before it reads the
-- text again). The last pair ends where the text ends.
--
-- A reading is used only while the value is its text (Lua interns every string: one
-- pointer compared), or the text the reading's last charge proposed (`next`, with
-- what it changes), which the call then wrote: any other value (written by hand, by
-- another release of this script, or deleted and written anew) is read from its text
-- again.
--
-- Busy means seen in two earlier calls (SW_SEEN: the time of the last call that saw
-- the state key, negative from its second) among the last SW_KEEP_MAX to
-- 2 x SW_KEEP_MAX state keys seen: an identity checked a few times makes no reading,
-- nor does a crowd of identities that each come back after more than that (its reading
-- would be dropped before its next use). Readings and sightings each live in two
-- generations of at most SW_KEEP_MAX state keys: when the newer is full, it becomes the
-- older, and the one it replaces is dropped; a state key found in the older moves to
-- the newer.
local SW_KEEP_MIN, SW_KEEP_MAX = 3, 200

-- A map of state keys in two generations (see above): {newer, older, n}.
local function generations()
  return {newer = {}, older = {}, n = 0}
end

-- Sets `key` to `value` in the newer generation (the older one dropped if it is full).
local function gen_put(g, key, value)
  if g.newer[key] == nil then
    if g.n >= SW_KEEP_MAX then
      g.older, g.newer, g.n = g.newer, {}, 0
    end
    g.n = g.n + 1
  end
  g.newer[key] = value
  return value
end

-- The value of `key` in either generation of `g` (values are never false), or nil.
local function gen_get(g, key)
  return g.newer[key] or g.older[key]
end

-- Readings by state key (then by field), and sightings by state key.
local SW_KEPT, SW_SEEN = generations(), generations()

-- Whether `key` is busy: seen in two calls before this one (at `now`), which sees it.
local function sw_busy(key, now)
  local seen = gen_get(SW_SEEN, key) -- (moved to the newer by the gen_put below)
  if seen == nil or seen == now or seen == -now then
    gen_put(SW_SEEN, key, seen or now)
    return false
  end
  gen_put(SW_SEEN, key, -now)
  return seen < 0
end

-- The reading `r` of `key`'s `field`, found in its readings `kept`, if it is the
-- value `v`'s and holds every pair live at `oldest`; else nil (and it is dropped).
local function sw_reading(kept, key, field, r, v, oldest)
  if SW_KEPT.newer[key] == nil then -- found in the older generation: moved
    gen_put(SW_KEPT, key, kept)
  end
  if r.text ~= v then
    if r.next ~= v then
      kept[field] = nil
      return nil
    end
    -- The call that proposed `next` wrote it: the charge is applied here.
    local t = r.t
    if r.append then
      t = t + 3
      r[t], r[t + 2], r.t = r.b, r.at, t
    end
    r[t + 1], r.total, r.base, r.text = r.count, r.total + r.cost, r.nbase, v
  end
  r.next = false
  if oldest < r.cut then
    kept[field] = nil
    return nil
  end
  local h = r.h
  if h > 31 then -- ten pairs left out: the pairs move to the front
    local t = r.t
    for o = h, t + 2 do
      r[o - h + 1] = r[o]
    end
    r.h, r.t = 1, t - h + 1
  end
  return r
end

-- Keeps a reading of `v`, a value of `key`'s `field` whose SW_N live pairs at `oldest`
-- (SW_IDX, SW_CNT, and where each starts, SW_AT) total `total`.
local function sw_keep(key, field, v, oldest, total)
  -- Made whole at once (the constructor sizes the table: room for 11 pairs and every
  -- field a charge sets), not grown field by field.
  local r = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, h = 1, t = 3 * SW_N - 2, total = total, base = 0, cut = oldest,
    text = v, next = false, count = 0, append = false, b = 0, at = 0, cost = 0, nbase = 0}
  for i = 1, SW_N do
    local o = 3 * i - 2
    r[o], r[o + 1], r[o + 2] = SW_IDX[i], SW_CNT[i], SW_AT[i]
  end
  gen_put(SW_KEPT, key, gen_get(SW_KEPT, key) or {})[field] = r
  return r
end

function ALG.sw.peek(v, now, limit, window, capacity, cost, key, field)
  local step = window / SW_BUCKETS
  local b = floor(now / step)
  local oldest = b - SW_BUCKETS
  local total, newest = 0, nil
  -- The live buckets, their total, the newest that counts, where the live pairs start
  -- (`from`) and where the last one starts and ends; and whether the indexes rise
  -- throughout, as this script writes them (oldest first), so that the live pairs are
  -- the text's tail: from a kept reading, or in one pass over the text.
  local from, last_at, last_end, previous, rising = nil, 0, 0, nil, true
  if SW_IDX == nil then
    SW_IDX, SW_CNT, SW_AT = {}, {}, {}
  end
  SW_N = 0
  local kept = KEPT and v and gen_get(SW_KEPT, key)
  local r = kept and kept[field]
  if r then
    r = sw_reading(kept, key, field, r, v, oldest)
  end
  if not r and v then
    local pos, plain = 1, true
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
        plain = plain and c > 0
        SW_N = SW_N + 1
        SW_IDX[SW_N], SW_CNT[SW_N], SW_AT[SW_N] = idx, c, at
        from = from or at
        last_at, last_end = at, stop
      end
    end
    if KEPT and rising and plain and SW_N >= SW_KEEP_MIN and last_end == #v
      and sw_busy(key, now) then
      r = sw_keep(key, field, v, oldest, total)
    end
  end
  if r then
    -- The pairs that slid out are left out of the reading (the text keeps them until
    -- the next write), then the common case, an allowed charge of live pairs.
    local h, t, base = r.h, r.t, r.base
    total = r.total
    while h <= t and r[h] < oldest do
      total = total - r[h + 1]
      h = h + 3
    end
    r.h, r.total, r.cut = h, total, oldest
    local last = r[t]
    if h <= t and last <= b and total + cost <= limit then
      newest = (cost > 0 and b > last) and b or last
      from = r[h + 2] - base
      local nbase = base + from - 1
      local value
      if last == b then
        r.count, r.append = r[t + 1] + cost, false
        value = ssub(v, from, r[t + 2] - base - 1) .. sformat('%d %d', b, r.count)
      else
        r.b, r.count, r.append, r.at = b, cost, true, #v - from + 3 + nbase
        value = ssub(v, from) .. sformat(' %d %d', b, cost)
      end
      -- A charge of 0 (a look) writes nothing, and a bucket of 0 would not be what a
      -- reading holds: no proposal, so that the same text written by hand is read anew.
      r.next, r.cost, r.nbase = cost > 0 and value, cost, nbase
      return true, limit - total - cost, 0, (newest + SW_BUCKETS + 1) * step - now, value,
        (b + SW_BUCKETS + 1) * step - now
    end
    -- Denied, nothing live, or the clock went back: the general way, below.
    SW_N, rising = 0, true -- (what a pass over the text may have found is the same)
    for o = h, t, 3 do
      SW_N = SW_N + 1
      SW_IDX[SW_N], SW_CNT[SW_N] = r[o], r[o + 1]
    end
    newest = SW_N > 0 and SW_IDX[SW_N] or nil
    if SW_N > 0 then
      from, last_at, last_end = r[h + 2] - base, r[t + 2] - base, #v
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
      value = sformat('%d %d', b, cost)
    elseif not rising or last > b then
      local parts, charged = {}, false
      for i = 1, n do
        local c = SW_CNT[i]
        if SW_IDX[i] == b then
          c, charged = c + cost, true
        end
        parts[i] = sformat('%d %d', SW_IDX[i], c)
      end
      if not charged then
        parts[n + 1] = sformat('%d %d', b, cost)
      end
      value = tconcat(parts, ' ')
    elseif last == b then
      value = ssub(v, from, last_at - 1) .. sformat('%d %d', b, SW_CNT[n] + cost)
    else
      value = ssub(v, from, last_end) .. sformat(' %d %d', b, cost)
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
