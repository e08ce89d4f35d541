-- A request's way in, in one atomic step: check and charge its counters (acquire.lua),
-- then, only if every one was charged, its fair-share claim (claim.lua or team_claim.lua).
-- Those scripts are defined before this one as functions of (KEYS, ARGV).
-- KEYS: the acquisition's, then the claim's.
-- ARGV[1] how many KEYS are the acquisition's, ARGV[2] how many ARGV, ARGV[3] 'c' for
-- claim.lua, 't' for team_claim.lua; then the acquisition's ARGV, then the claim's.
-- Returns {acquire's reply} when a limit refused (nothing is claimed), else
-- {acquire's reply, the claim's reply}.
local nk, na = tonumber(ARGV[1]), tonumber(ARGV[2])
local function slice(list, from, to)
  local out = {}
  for i = from, to do
    out[#out + 1] = list[i]
  end
  return out
end
local verdict = acquire(slice(KEYS, 1, nk), slice(ARGV, 4, 3 + na))
if verdict[1] ~= 0 then
  return {verdict}
end
local take = claim
if ARGV[3] == 't' then
  take = team_claim
end
return {verdict, take(slice(KEYS, nk + 1, #KEYS), slice(ARGV, 4 + na, #ARGV))}
