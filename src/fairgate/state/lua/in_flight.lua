-- Within-share slots held per organisation in one pool, live leases only; changes nothing.
-- KEYS[1]: the pool's index of organisations that claimed (zset org → latest expiry written).
-- ARGV[1] now (s), ARGV[2] the common prefix of the pool's slot sets ("…fairshare:inflight:<pool>:")
-- Returns {org_1, held_1, org_2, held_2, ...}, only organisations holding at least one slot.
-- The slot sets are named from the index, not passed in KEYS: one server only (no Cluster),
-- like every script of this store.
local function escape(name) -- mirrors _escape in fairgate/state/redis.py
  return (string.gsub((string.gsub(name, '%%', '%%25')), ':', '%%3A'))
end

local out = {}
for _, org in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local held = redis.call('ZCOUNT', ARGV[2] .. escape(org), '(' .. ARGV[1], '+inf')
  if held > 0 then
    out[#out + 1] = org
    out[#out + 1] = held
  end
end
return out
