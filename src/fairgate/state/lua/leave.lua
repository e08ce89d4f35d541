-- A request's way out, in one step: settle its counters (settle.lua), give its fair-share
-- slot back and charge its organisation's usage (charge.lua); each part may be absent.
-- Those scripts are defined before this one as functions of (KEYS, ARGV).
-- KEYS: the settle's, then the slot set (when a slot is released), then the charge's.
-- ARGV[1] how many KEYS are the settle's, ARGV[2] how many ARGV (0: no settle), ARGV[3] '1'
-- when a slot is released, ARGV[4] how many KEYS are the charge's (0: no charge); then the
-- settle's ARGV, the slot's lease id (when released), the charge's ARGV.
local ns, na, nc = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[4])
local function slice(list, from, to)
  local out = {}
  for i = from, to do
    out[#out + 1] = list[i]
  end
  return out
end
local k, a = ns + 1, 5 + na
if ns > 0 then
  settle(slice(KEYS, 1, ns), slice(ARGV, 5, 4 + na))
end
if ARGV[3] == '1' then
  redis.call('ZREM', KEYS[k], ARGV[a])
  k, a = k + 1, a + 1
end
if nc > 0 then
  charge(slice(KEYS, k, k + nc - 1), slice(ARGV, a, #ARGV))
end
return 0
