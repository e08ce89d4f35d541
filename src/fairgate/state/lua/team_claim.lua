-- A team-aware claim (an organisation with team sub-shares), in one atomic step:
-- a slot of the group's own sub-reservation if fewer are held, else one of the
-- organisation's unused seats if its groups and in-org borrowers hold fewer than its
-- reservation together, else nothing (the request borrows from the pool).
-- KEYS[1]: the group's own slots (zset lease id → expiry, s); KEYS[2]: the group's in-org
-- slots; KEYS[3]: the pool's index of organisations; KEYS[4..]: every slot set of the
-- organisation (own and in-org, of the rest and of each team with a share; KEYS[1] and
-- KEYS[2] among them).
-- ARGV[1] now (s), ARGV[2] lease id, ARGV[3] lease ttl (s), ARGV[4] the group's
-- sub-reservation, ARGV[5] the organisation's reservation, ARGV[6] org
-- Returns {1, own before} (own slot), {2, total before} (in-org seat), {0, total} (borrows).
-- Mirrors MemoryCounterStore.claim with a split; keep them in step.
local now, ttl = tonumber(ARGV[1]), tonumber(ARGV[3])
local sub, reservation = tonumber(ARGV[4]), tonumber(ARGV[5])
local keep = math.ceil(2 * ttl * 1000)
local function take(key)
  redis.call('ZADD', key, now + ttl, ARGV[2])
  redis.call('PEXPIRE', key, keep)
  redis.call('ZADD', KEYS[3], now + ttl, ARGV[6])
  redis.call('PEXPIRE', KEYS[3], keep)
end
for i = 4, #KEYS do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', ARGV[1])
end
local own = redis.call('ZCARD', KEYS[1])
if own < sub then
  take(KEYS[1])
  return {1, own}
end
local total = 0
for i = 4, #KEYS do
  total = total + redis.call('ZCARD', KEYS[i])
end
if total < reservation then
  take(KEYS[2])
  return {2, total}
end
return {0, total}
