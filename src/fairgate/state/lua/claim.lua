-- Take one within-share slot of an organisation if fewer than its reservation are held.
-- KEYS[1]: the organisation's slots in one pool (zset lease id → expiry, s).
-- KEYS[2]: the pool's index of organisations that claimed (zset org → latest expiry written),
--          read by in_flight.lua; refreshed with the slots, so it outlives every live slot.
-- ARGV[1] now (s), ARGV[2] lease id, ARGV[3] lease ttl (s), ARGV[4] reservation, ARGV[5] org
-- Returns {1, held before} when the slot was taken, {0, held} when the request borrows.
-- Mirrors MemoryCounterStore.claim; keep them in step.
local now, ttl, reservation = tonumber(ARGV[1]), tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
local held = redis.call('ZCARD', KEYS[1])
if held >= reservation then
  return {0, held}
end
local keep = math.ceil(2 * ttl * 1000)
redis.call('ZADD', KEYS[1], now + ttl, ARGV[2])
redis.call('PEXPIRE', KEYS[1], keep)
redis.call('ZADD', KEYS[2], now + ttl, ARGV[5])
redis.call('PEXPIRE', KEYS[2], keep)
return {1, held}
