-- Decay an organisation's usage to now and add a cost, in one step.
-- KEYS[1]: the pool's usage (hash org → "value at", both written with 17 digits).
-- ARGV[1] org, ARGV[2] cost, ARGV[3] now (s), ARGV[4] half-life (s),
-- ARGV[5] the hash's expiry (ms from now)
-- Mirrors fairgate.fairshare.decay.DecayedUsage.charged; keep them in step.
local cost, now, half_life = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local value, at = 0, now
local stored = redis.call('HGET', KEYS[1], ARGV[1])
if stored then
  local v, t = string.match(stored, '^(%S+) (%S+)$')
  value, at = tonumber(v), tonumber(t)
end
local when = math.max(now, at)
value = value * math.exp(-math.log(2) * (when - at) / half_life) + cost
redis.call('HSET', KEYS[1], ARGV[1], string.format('%.17g %.17g', value, when))
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 0
