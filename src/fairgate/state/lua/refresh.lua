-- Extend in-flight leases still held (never re-adding one that already expired).
-- KEYS[i]: an in-flight counter, ARGV[i + 2]: the lease id held in it,
-- ARGV[1]: the new expiry score (s), ARGV[2]: the counter's expiry (ms from now)
for i = 1, #KEYS do
  redis.call('ZADD', KEYS[i], 'XX', ARGV[1], ARGV[i + 2])
  redis.call('PEXPIRE', KEYS[i], ARGV[2])
end
return 0
