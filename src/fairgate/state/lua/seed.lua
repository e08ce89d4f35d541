-- Raise a period counter to a total recorded elsewhere, never lowering it.
-- KEYS[1] counter; KEYS[2] (budgets only) the recorded total the counter already holds,
-- kept ARGV[3] ms after each seed.
-- ARGV[1] total, ARGV[2] the counter's expiry (ms from now), ARGV[3] see KEYS[2],
-- ARGV[4] '1' when the caller may have served the counter's scope without charging it
-- (a budget new to a running gateway): the spend recorded since the last seed is then
-- added, since the counter may hold none of it; taking the larger of counter and total
-- would drop it whenever the counter holds reservations not yet recorded.
local total = tonumber(ARGV[1])
local value = tonumber(redis.call('GET', KEYS[1]) or '-1')
local taken = false
if #KEYS > 1 then
  taken = redis.call('GET', KEYS[2])
end
if taken and value >= 0 then
  local since = total - tonumber(taken)
  if ARGV[4] == '1' and since > 0 then
    value = redis.call('INCRBY', KEYS[1], since)
    redis.call('SET', KEYS[2], total, 'PX', ARGV[3])
  end
elseif #KEYS > 1 then
  redis.call('SET', KEYS[2], total, 'PX', ARGV[3])
end
if value < total then
  redis.call('SET', KEYS[1], total, 'KEEPTTL')
end
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
