-- take: the runner's reserve and start in one step. Its task process is forked ahead (its pid
-- is known before the task is), so the task it reserves is started with that pid at once: one
-- round trip from the listener's wake-up to the hand-over, where reserve then start cost two.
-- What Redis holds after it is exactly what reserve then start leave.
-- KEYS[1..6] and ARGV[1..6] as reserve_next's (reserve.lib); then KEYS[7] started set,
-- KEYS[8] failed list, KEYS[9] lease index, KEYS[10] unique hash, KEYS[11] error types
-- ARGV[7] lease key prefix, ARGV[8] pid, ARGV[9] lease ttl (ms), ARGV[10] failed-by-type key
-- prefix
-- ARGV[3] (now) may be '': Redis's clock then (a take sent ahead of its task, see
-- take_ahead.py, runs when the task comes, which the listener cannot know when it sends it).
-- Returns reserve_next's false, or as one JSON text (one string to read, where the task's
-- fields as a RESP array cost a Python parser a read per field): [id, "skipped", why],
-- [id, "ok", start_reserved's reply, more] (the task's fields as an object, 0 or -1; more: 1
-- when other tasks wait in the queue, else 0: the listener then forks its next spare at once,
-- not after the hand-over), or [id, "unstarted", why] when start_reserved refused a key of the
-- wrong type: the task is then reserved, not started (the caller puts it back).
--#include common.lib
--#include reserve.lib
--#include start.lib
-- nothing waits (no pending list, prioritized set, nor wake list to empty): what reserve_next
-- would find, in one command rather than five (a take sent ahead runs once per idle minute)
if redis.call('EXISTS', KEYS[1], KEYS[3], KEYS[4]) == 0 then
  return false
end
local now = ARGV[3] ~= '' and ARGV[3] or string.format('%.6f', server_time())
local found = reserve_next({KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]},
                           {ARGV[1], ARGV[2], now, ARGV[4], ARGV[5], ARGV[6]},
                           function(id) return {ARGV[7] .. id, ARGV[10] .. CANCELLED} end)
if not found or found.err then
  return found
end
if found[2] ~= 'ok' then
  return cjson.encode(found)
end
local id = found[1]
-- the started member's shape is Keys.started_member's: "<listener> <pid> <id>"
local started = start_reserved(
  {ARGV[1] .. id, KEYS[7], ARGV[7] .. id, KEYS[2], KEYS[8], KEYS[9], KEYS[10], KEYS[11]},
  {id, ARGV[2] .. ' ' .. ARGV[8] .. ' ' .. id, ARGV[8], ARGV[4], now, ARGV[9], ARGV[2],
   ARGV[10]})
if type(started) == 'table' and started.err then
  return cjson.encode({id, 'unstarted', started.err})
end
if type(started) == 'table' then
  local fields = {}
  for i = 1, #started, 2 do
    fields[started[i]] = started[i + 1]
  end
  started = fields
end
local more = (usable(KEYS[1], 'list') and redis.call('LLEN', KEYS[1]) > 0)
             or (usable(KEYS[3], 'zset') and redis.call('ZCARD', KEYS[3]) > 0)
return cjson.encode({id, 'ok', started, more and 1 or 0})
