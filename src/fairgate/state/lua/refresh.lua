-- Extend leases still held (never re-adding one that already expired).
-- KEYS[i]: a sorted set holding member ARGV[i + 2]: an in-flight counter and a lease id, or a
-- pool's index of organisations and an organisation (kept alive as long as its slots).
-- ARGV[1]: the new expiry score (s), ARGV[2]: the set's expiry (ms from now)
for i = 1, #KEYS do
  redis.call('ZADD', KEYS[i], 'XX', ARGV[1], ARGV[i + 2])
  redis.call('PEXPIRE', KEYS[i], ARGV[2])
end
return 0
