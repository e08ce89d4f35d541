-- Decay an organisation's usage to now and add a cost, in one step; a team's too.
-- KEYS[1]: the pool's usage (hash org → "value at", both written with 17 digits);
-- KEYS[2] (optional): the pool's usage per team (hash "<org>:<team>", escaped → "value at").
-- ARGV[1] org, ARGV[2] cost, ARGV[3] now (s), ARGV[4] half-life (s),
-- ARGV[5] the hashes' expiry (ms from now), ARGV[6] (with KEYS[2]) the team's field
-- Mirrors fairgate.fairshare.decay.DecayedUsage.charged; keep them in step.
local cost, now, half_life = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local function charge(key, field)
  local value, at = 0, now
  local stored = redis.call('HGET', key, field)
  if stored then
    local v, t = string.match(stored, '^(%S+) (%S+)$')
    value, at = tonumber(v), tonumber(t)
  end
  local when = math.max(now, at)
  value = value * math.exp(-math.log(2) * (when - at) / half_life) + cost
  redis.call('HSET', key, field, string.format('%.17g %.17g', value, when))
  redis.call('PEXPIRE', key, ARGV[5])
end
charge(KEYS[1], ARGV[1])
if KEYS[2] then
  charge(KEYS[2], ARGV[6])
end
return 0
