-- Within-share slots held per organisation in one pool, live leases only; changes nothing.
-- KEYS[1]: the pool's index of organisations that claimed (zset org → latest expiry written).
-- ARGV[1] now (s), ARGV[2] the common prefix of the pool's slot sets ("…fairshare:inflight:<pool>:"),
-- ARGV[3]: "1" to return per team (from the lease ids "<id>/<team>"), "0" per organisation;
-- ARGV[4..]: for each organisation with team sub-shares: org, n, then its n teams with a
-- share (their own and in-org slot sets, and the rest's in-org set, count too).
-- Returns {org_1, held_1, ...} (organisations holding at least one slot), or per team
-- {org_1, team_1, held_1, ...}.
-- The slot sets are named from the index, not passed in KEYS: one server only (no Cluster),
-- like every script of this store.
local function escape(name) -- mirrors _escape in fairgate/state/redis.py
  return (string.gsub((string.gsub(name, '%%', '%%25')), ':', '%%3A'))
end

local teams = {}
local i = 4
while i <= #ARGV do
  local org, n = ARGV[i], tonumber(ARGV[i + 1])
  local list = {}
  for j = 1, n do
    list[j] = ARGV[i + 1 + j]
  end
  teams[org] = list
  i = i + 2 + n
end

local function sets(org) -- mirrors RedisCounterStore._group_key
  local base = ARGV[2] .. escape(org)
  local out = {base}
  local list = teams[org]
  if list then
    out[#out + 1] = base .. ':b:'
    for _, team in ipairs(list) do
      out[#out + 1] = base .. ':t:' .. escape(team)
      out[#out + 1] = base .. ':b:' .. escape(team)
    end
  end
  return out
end

local out = {}
for _, org in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  if ARGV[3] == '1' then
    local counts, order = {}, {}
    for _, key in ipairs(sets(org)) do
      for _, lease in ipairs(redis.call('ZRANGEBYSCORE', key, '(' .. ARGV[1], '+inf')) do
        local slash = string.find(lease, '/', 1, true)
        if slash then
          local team = string.sub(lease, slash + 1)
          if not counts[team] then
            counts[team] = 0
            order[#order + 1] = team
          end
          counts[team] = counts[team] + 1
        end
      end
    end
    for _, team in ipairs(order) do
      out[#out + 1] = org
      out[#out + 1] = team
      out[#out + 1] = counts[team]
    end
  else
    local held = 0
    for _, key in ipairs(sets(org)) do
      held = held + redis.call('ZCOUNT', key, '(' .. ARGV[1], '+inf')
    end
    if held > 0 then
      out[#out + 1] = org
      out[#out + 1] = held
    end
  end
end
return out
