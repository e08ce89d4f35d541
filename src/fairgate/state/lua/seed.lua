-- Raise a period counter to at least a total, never lowering it.
-- KEYS[1] counter, ARGV[1] total, ARGV[2] expiry (ms from now)
local value = tonumber(redis.call('GET', KEYS[1]) or '-1')
if value < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1], 'KEEPTTL')
end
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
