-- window: one page of tasks for a list screen, read in one step and nothing written: the ids
-- of a window of a list (LRANGE: head first, so newest first), of a sorted set (ZREVRANGE:
-- highest score first, with the scores), or ids given; then the named fields of each task.
-- Values longer than a limit are cut on a UTF-8 boundary and end with an ellipsis, so a page
-- costs what it shows, however long the parameters or errors stored.
-- KEYS[1] the list or sorted set (unused for 'ids')
-- ARGV[1] 'list', 'zset' or 'ids', ARGV[2] start, ARGV[3] stop, ARGV[4] task key prefix,
-- ARGV[5] longest value returned (bytes), ARGV[6] number of fields n, ARGV[7..6+n] the fields,
-- then, for 'ids', the ids
-- A key of the wrong type (written by someone else) is read as empty, and a task key that is
-- not a hash as a task whose fields could not be read: one bad key never fails the page.
-- Returns, per task: id, score (sorted set) or false, 1 (read) or 0 (not a hash), then the n
-- values (false when missing).
--#include common.lib
local kind, n, limit = ARGV[1], tonumber(ARGV[6]), tonumber(ARGV[5])
local ids, scores = {}, {}
local function read(...)
  local reply = redis.pcall(...)
  if type(reply) == 'table' and reply['err'] then
    return nil
  end
  return reply
end
if kind == 'list' then
  ids = read('LRANGE', KEYS[1], ARGV[2], ARGV[3]) or {}
elseif kind == 'zset' then
  local flat = read('ZREVRANGE', KEYS[1], ARGV[2], ARGV[3], 'WITHSCORES') or {}
  for i = 1, #flat, 2 do
    table.insert(ids, flat[i])
    table.insert(scores, flat[i + 1])
  end
else
  for i = 7 + n, #ARGV do
    table.insert(ids, ARGV[i])
  end
end
local fields = {}
for i = 1, n do
  fields[i] = ARGV[6 + i]
end
local out = {}
for i, id in ipairs(ids) do
  table.insert(out, id)
  table.insert(out, scores[i] or false)
  local values = read('HMGET', ARGV[4] .. id, unpack(fields))
  table.insert(out, values and 1 or 0)
  values = values or {}
  for j = 1, n do
    local value = values[j]
    if value and #value > limit then
      local cut = limit
      -- back off continuation bytes (10xxxxxx) so a character is never split
      while cut > 0 and string.byte(value, cut + 1) >= 128 and string.byte(value, cut + 1) < 192 do
        cut = cut - 1
      end
      value = string.sub(value, 1, cut) .. '…'
    end
    table.insert(out, value or false)
  end
end
return out
