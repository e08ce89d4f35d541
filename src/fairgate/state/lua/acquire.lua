-- Check and charge several counters at once: all of them or none.
-- KEYS[i]: counter i.  ARGV[1] now (s), ARGV[2] lease id, ARGV[3] lease ttl (s),
-- then six fields per counter: kind, amount, limit, a, b, c
--   'w' sliding window:  a = length (s), b = granules
--   'p' period counter:  a = resets_at (s), b = keep_until (s), c = '1' for overdraft
--   'f' in-flight slots
--   'm' a mark: refused while the key does not exist; charges nothing, its total is its value
-- Returns {0, total_1, ..., total_n} when charged, {i, retry_after_ms} when counter i refused.
-- Mirrors fairgate.limits.window and fairgate.state.memory; keep them in step.
local now = tonumber(ARGV[1])
local lease = ARGV[2]
local ttl = tonumber(ARGV[3])
local n = #KEYS

local function arg(i, j)
  return ARGV[3 + (i - 1) * 6 + j]
end

-- live buckets of window i (dropping the dead ones), their sum and the current bucket
local function window(i)
  local key, length, granules = KEYS[i], tonumber(arg(i, 4)), tonumber(arg(i, 5))
  local g = length / granules
  local cur = math.floor(now / g)
  local lowest = cur - granules
  local flat = redis.call('HGETALL', key)
  local sum, live = 0, {}
  for j = 1, #flat, 2 do
    local b = tonumber(flat[j])
    if b < lowest then
      redis.call('HDEL', key, flat[j])
    elseif b <= cur then
      local v = tonumber(flat[j + 1])
      sum = sum + v
      live[#live + 1] = {b, v}
    end
  end
  return sum, live, cur, g, granules, length
end

local function window_retry(sum, live, amount, limit, g, granules, length)
  table.sort(live, function(x, y) return x[1] < y[1] end)
  local excess = sum + amount - limit
  for _, bv in ipairs(live) do
    excess = excess - bv[2]
    if excess <= 0 then
      return math.max(0, (bv[1] + granules + 1) * g - now)
    end
  end
  return length
end

local used, current = {}, {}
for i = 1, n do
  local kind, amount, limit = arg(i, 1), tonumber(arg(i, 2)), tonumber(arg(i, 3))
  if kind == 'w' then
    local sum, live, cur, g, granules, length = window(i)
    if sum + amount > limit then
      local retry = window_retry(sum, live, amount, limit, g, granules, length)
      return {i, math.ceil(retry * 1000)}
    end
    used[i], current[i] = sum, cur
  elseif kind == 'p' then
    local value = tonumber(redis.call('GET', KEYS[i]) or '0')
    local fits
    if arg(i, 6) == '1' then fits = value < limit else fits = value + amount <= limit end
    if not fits then
      return {i, math.ceil(math.max(0, tonumber(arg(i, 4)) - now) * 1000)}
    end
  elseif kind == 'f' then
    redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', ARGV[1])
    if redis.call('ZCARD', KEYS[i]) + 1 > limit then
      return {i, -1}
    end
  elseif redis.call('EXISTS', KEYS[i]) == 0 then
    return {i, 0}
  end
end

-- Expiries are set when a write creates what they must outlive, not on every write:
-- a window's hash when a bucket is created (the bucket is counted until one granule
-- past a window after it starts, and the hash lives a window and two granules from
-- its first write, so a later write to the same bucket needs no longer), a period's
-- counter when it is created (its keep_until is the same for every charge of one key,
-- the key naming its period). A write that returns exactly its own amount may have
-- created it: that one sets the expiry.
local totals = {0}
for i = 1, n do
  local kind, key = arg(i, 1), KEYS[i]
  if kind == 'w' then
    local amount = tonumber(arg(i, 2))
    if redis.call('HINCRBY', key, current[i], amount) == amount then
      local length, granules = tonumber(arg(i, 4)), tonumber(arg(i, 5))
      redis.call('PEXPIRE', key, math.ceil((length + 2 * length / granules) * 1000))
    end
    totals[i + 1] = used[i] + amount
  elseif kind == 'p' then
    local total = redis.call('INCRBY', key, arg(i, 2))
    if total == tonumber(arg(i, 2)) then
      local keep = math.max(1000, math.ceil((tonumber(arg(i, 5)) - now) * 1000))
      redis.call('PEXPIRE', key, keep)
    end
    totals[i + 1] = total
  elseif kind == 'f' then
    redis.call('ZADD', key, now + ttl, lease)
    redis.call('PEXPIRE', key, math.ceil(2 * ttl * 1000))
    totals[i + 1] = redis.call('ZCARD', key)
  else
    totals[i + 1] = tonumber(redis.call('GET', key))  -- the mark's value, for settle.lua
  end
end
return totals
