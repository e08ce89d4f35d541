-- Current usage of counters, charging nothing.
-- KEYS[i]: counter i.  ARGV[1] now (s), then three fields per counter: kind, a, b
--   'w' window: a = length (s), b = granules;  'p' period;  'f' in-flight
local now = tonumber(ARGV[1])
local out = {}
for i = 1, #KEYS do
  local kind, key = ARGV[2 + (i - 1) * 3], KEYS[i]
  if kind == 'w' then
    local length, granules = tonumber(ARGV[3 + (i - 1) * 3]), tonumber(ARGV[4 + (i - 1) * 3])
    local cur = math.floor(now / (length / granules))
    local flat = redis.call('HGETALL', key)
    local sum = 0
    for j = 1, #flat, 2 do
      local b = tonumber(flat[j])
      if b >= cur - granules and b <= cur then sum = sum + tonumber(flat[j + 1]) end
    end
    out[i] = sum
  elseif kind == 'p' then
    out[i] = tonumber(redis.call('GET', key) or '0')
  else
    out[i] = redis.call('ZCOUNT', key, '(' .. ARGV[1], '+inf')
  end
end
return out
