-- Release a lease's in-flight slots and correct its estimates.
-- KEYS[i]: counter i.  ARGV[1] lease id, then six fields per counter: kind, a, b, c, d, e
--   'w' window:    a = bucket charged, b = refund (>= 0), c = bucket now, d = excess (>= 0),
--                  e = the window's expiry (ms from now)
--   'p' period:    a = signed delta, b = what the request is charged (>= 0); only if the
--                  counter still exists: never recreate it
--   'm' mark:      a = the mark's value when the lease was taken
--   'f' in-flight: nothing
-- A mark whose value changed since was set again by a restore of the budget counters
-- from the recorded spend (Redis lost its data meanwhile): the counters it restored
-- never held this lease's reservation, so a period counter is charged b, not corrected
-- by a (a refund of a reservation it never held would wipe the restored spend).
local lease = ARGV[1]

local function arg(i, j)
  return ARGV[1 + (i - 1) * 6 + j]
end

local restored = false
for i = 1, #KEYS do
  if arg(i, 1) == 'm' and redis.call('GET', KEYS[i]) ~= arg(i, 2) then
    restored = true
  end
end

for i = 1, #KEYS do
  local kind, key = arg(i, 1), KEYS[i]
  if kind == 'w' then
    local refund, excess = tonumber(arg(i, 3)), tonumber(arg(i, 5))
    if refund > 0 and redis.call('HEXISTS', key, arg(i, 2)) == 1 then
      if redis.call('HINCRBY', key, arg(i, 2), -refund) <= 0 then
        redis.call('HDEL', key, arg(i, 2))
      end
    end
    -- the expiry is set when the write creates the bucket (as in acquire.lua)
    if excess > 0 and redis.call('HINCRBY', key, arg(i, 4), excess) == excess then
      redis.call('PEXPIRE', key, arg(i, 6))
    end
  elseif kind == 'p' then
    local delta = arg(i, 2)
    if restored then
      delta = arg(i, 3)
    end
    if tonumber(delta) ~= 0 and redis.call('EXISTS', key) == 1 then
      if redis.call('INCRBY', key, delta) < 0 then
        redis.call('SET', key, '0', 'KEEPTTL')
      end
    end
  elseif kind == 'f' then
    redis.call('ZREM', key, lease)
  end
end
return 0
