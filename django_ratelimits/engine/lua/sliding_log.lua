-- Sliding log: a ZSET with one member per unit of cost, scored by its time.
-- Exact; memory grows with the limit. Members are "time:ordinal" so requests
-- in the same microsecond stay distinct. The one algorithm with a key of its
-- own (ALG.log.zset): it reads and writes that key itself.
ALG.log = {zset = true}
local LOG_BATCH = 1000

local function log_score_at(key, now, window, rank, reverse)
  local lo, hi = sformat('(%d', now - window), '+inf'
  local r
  if reverse then
    r = rcall('ZREVRANGEBYSCORE', key, hi, lo, 'WITHSCORES', 'LIMIT', fmt(rank), '1')
  else
    r = rcall('ZRANGEBYSCORE', key, lo, hi, 'WITHSCORES', 'LIMIT', fmt(rank), '1')
  end
  return tonumber(r[2])
end

function ALG.log.peek(key, now, limit, window, capacity, cost)
  local count = rcall('ZCOUNT', key, sformat('(%d', now - window), '+inf')
  if count + cost <= limit then
    local reset = window
    if cost == 0 then
      reset = (count > 0) and (log_score_at(key, now, window, 0, true) + window - now) or 0
    end
    return true, limit - count - cost, 0, reset, count
  end
  -- Denied: the request fits once the oldest `count + cost - limit` entries
  -- have left the window (cost <= limit, so that many exist).
  local reset = log_score_at(key, now, window, 0, true) + window - now
  local retry = log_score_at(key, now, window, count + cost - limit - 1, false) + window - now
  return false, max(0, limit - count), retry, reset, nil
end

function ALG.log.commit(key, now, window, cost, count)
  rcall('ZREMRANGEBYSCORE', key, '-inf', sformat('%d', now - window))
  -- At most LOG_BATCH members per ZADD: Lua's unpack() refuses more than about 8000
  -- values (its C stack), and a cost may be up to the limit (1,000,000).
  local stamp, args = fmt(now), {}
  for first = 0, cost - 1, LOG_BATCH do
    local n = min(cost - first, LOG_BATCH)
    for i = 0, n - 1 do
      args[2 * i + 1] = stamp
      args[2 * i + 2] = sformat('%d:%d', now, count + first + i)
    end
    rcall('ZADD', key, unpack(args, 1, 2 * n))
  end
  expire_in(key, window)
end
