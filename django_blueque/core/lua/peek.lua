-- peek: one task hash for the task page, read so that the page costs what it shows however
-- big the hash: the named fields with their values cut to a limit, then at most a given number
-- of the other fields (all of them when the hash is small, else a sample: HRANDFIELD), cut the
-- same way. Nothing written.
-- KEYS[1] the task hash
-- ARGV[1] longest value returned (bytes) of the first ARGV[3] named fields (the long texts),
-- ARGV[2] longest value of any other field, ARGV[3] how many named fields are long texts,
-- ARGV[4] most other fields returned, ARGV[5..] the named fields
-- Returns false for no key, {type} for a key that is not a hash, else {number of fields,
-- then per field returned: name, value, its full length in bytes}.
--#include common.lib
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then
  return false
end
if kind ~= 'hash' then
  return {kind}
end
local texts, most = tonumber(ARGV[3]), tonumber(ARGV[4])
local out = {redis.call('HLEN', KEYS[1])}
local function add(name, limit)
  local value = redis.call('HGET', KEYS[1], name)
  if not value then
    return
  end
  local length = #value
  if length > limit then
    local cut = limit
    -- back off continuation bytes (10xxxxxx) so a character is never split
    while cut > 0 and string.byte(value, cut + 1) >= 128 and string.byte(value, cut + 1) < 192 do
      cut = cut - 1
    end
    value = string.sub(value, 1, cut)
  end
  table.insert(out, name)
  table.insert(out, value)
  table.insert(out, length)
end
local named = {}
for i = 5, #ARGV do
  named[ARGV[i]] = true
  add(ARGV[i], (i - 4 <= texts) and tonumber(ARGV[1]) or tonumber(ARGV[2]))
end
local others
if out[1] <= most + #ARGV - 4 then
  others = redis.call('HKEYS', KEYS[1])
else
  others = redis.call('HRANDFIELD', KEYS[1], most + #ARGV - 4)
end
local taken = 0
for _, name in ipairs(others) do
  if taken >= most then
    break
  end
  if not named[name] then
    add(name, tonumber(ARGV[2]))
    taken = taken + 1
  end
end
return out
