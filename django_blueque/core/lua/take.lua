-- take: the runner's reserve and start in one step. Its task process is forked first (its pid
-- is known before the task is), so the task it reserves is started with that pid at once: one
-- round trip from the listener's wake-up to the hand-over, where reserve then start cost two.
-- What Redis holds after it is exactly what reserve then start leave.
-- KEYS[1..6] and ARGV[1..6] as reserve_next's (reserve.lib); then KEYS[7] started set,
-- KEYS[8] failed list, KEYS[9] lease index, KEYS[10] unique hash, KEYS[11] error types
-- KEYS[12] scheduled set, KEYS[13] due index (reserve_next's k[7], k[8])
-- ARGV[7] lease key prefix, ARGV[8] pid, ARGV[9] lease ttl (ms), ARGV[10] failed-by-type key
-- prefix, ARGV[11] and ARGV[12] reserve_next's a[8] and a[9], ARGV[13] start_reserved's a[9]
-- ARGV[3] (now) may be '': Redis's clock then.
-- The queue's limits (admission.py): KEYS[14..18] Keys.admission's, ARGV[14] MAX_RUNNING,
-- ARGV[15] MAX_RUNNING_PER_KEY, ARGV[16] and ARGV[17] RATE_LIMIT's starts and seconds ('' for
-- none). A take the limits refuse returns ['', 'full', 0] (the queue runs MAX_RUNNING: wait
-- on the slot wake list) or ['', 'rate', seconds until the window allows a start]; one that
-- held HOLD_BATCH tasks of full keys and started none, ['', 'held', 0, 1] (take again).
-- Returns reserve_next's false, or as one JSON text (one string to read, where the task's
-- fields as a RESP array cost a Python parser a read per field): [id, "skipped", why],
-- [id, "ok", start_reserved's reply, more] (the task's fields as an object, 0 or -1; more: 1
-- when other tasks wait in the queue, else 0: the listener then takes again at once rather
-- than wait on its peeks), or [id, "unstarted", why] when start_reserved refused a key of the
-- wrong type: the task is then reserved, not started (the caller puts it back).
--#include common.lib
--#include admin.lib
--#include depends.lib
--#include reserve.lib
--#include start.lib
--#include admission.lib

-- How many tasks one take sets aside (held) before it answers "more".
local HOLD_BATCH = 50

-- Set aside (held) the tasks next in line whose concurrency key has `per_key` runs already, so
-- that the tasks of other keys go past them. `k`: reserve_next's keys. Returns true when it
-- stopped at HOLD_BATCH (more may wait at the head), else false (the next in line may start).
local function hold_full_keys(k, a, per_key, task_of, waiting)
  if not (usable(a[3], 'zset') and usable(a[4], 'zset')) then
    return false
  end
  for _ = 1, HOLD_BATCH do
    local id, prioritized = next_in_line(k)
    if not id then
      return false
    end
    local task = task_of(id)
    here({task})
    local key = redis.call('TYPE', task).ok == 'hash' and redis.call('HGET', task, 'concurrency_key')
    if not key then
      return false  -- no key (or no hash: reserve_next deals with it)
    end
    local runs, dropped = runs_of_key(a, key, task_of)
    if dropped > 0 then
      unhold(a, key, task_of, waiting, dropped)  -- older tasks of this key go first; look again
    elseif runs < per_key then
      return false
    else
      if prioritized then
        redis.call('ZREM', k[3], id)
      else
        redis.call('RPOP', k[1])  -- id, the list's tail (next_in_line)
      end
      local since = redis.call('HGET', task, 'held_since') or string.format('%.6f', server_time())
      redis.call('HSET', task, 'held_since', since)
      redis.call('ZADD', a[4], 0, key .. ' ' .. since .. ' ' .. id)
    end
  end
  return true
end

-- nothing waits (no pending list, prioritized set, nor wake list to empty): what reserve_next
-- would find, in one command rather than five (a take sent ahead runs once per idle minute)
if redis.call('EXISTS', KEYS[1], KEYS[3], KEYS[4]) == 0 then
  return false
end
local now = ARGV[3] ~= '' and ARGV[3] or string.format('%.6f', server_time())
local A = {KEYS[14], KEYS[15], KEYS[16], KEYS[17], KEYS[18]}
local max_running, per_key = tonumber(ARGV[14]), tonumber(ARGV[15])
local rate, window = tonumber(ARGV[16]), tonumber(ARGV[17])
if max_running and usable(KEYS[7], 'set') and redis.call('SCARD', KEYS[7]) >= max_running then
  redis.call('SET', A[1], '1')
  redis.call('DEL', A[2])
  return cjson.encode({'', 'full', 0})
end
local clock = server_time()
if rate and usable(A[5], 'zset') then
  redis.call('ZREMRANGEBYSCORE', A[5], '-inf', clock - window)
  if redis.call('ZCARD', A[5]) >= rate then
    local oldest = tonumber(redis.call('ZRANGE', A[5], 0, 0, 'WITHSCORES')[2])
    return cjson.encode({'', 'rate', math.max(oldest + window - clock, 0.001)})
  end
end
local function task_of(id)
  return ARGV[1] .. id
end
if per_key and hold_full_keys(KEYS, A, per_key, task_of, {
    KEYS[1], KEYS[3], dependency_keys(ARGV[13]).priority_sequence(ARGV[5]), KEYS[4]}) then
  return cjson.encode({'', 'held', 0, 1})  -- the next in line is not looked at yet: again
end
local found = reserve_next({KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[12],
                            KEYS[13], KEYS[8], KEYS[11]},
                           {ARGV[1], ARGV[2], now, ARGV[4], ARGV[5], ARGV[6], ARGV[10],
                            ARGV[11], ARGV[12]},
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
   ARGV[10], ARGV[13]})
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
if per_key then
  local key = redis.call('HGET', ARGV[1] .. id, 'concurrency_key')
  if key and usable(A[3], 'zset') then
    redis.call('ZADD', A[3], 0, key .. ' ' .. id)
  end
  redis.call('HDEL', ARGV[1] .. id, 'held_since')
end
if rate and usable(A[5], 'zset') then
  redis.call('ZADD', A[5], clock, ARGV[4])
  redis.call('PEXPIRE', A[5], math.ceil(window * 1000))
end
-- more: another take could start a task now (not when this start used the queue's last slot
-- or the last start its window allows: the listener would fork a spare for nothing)
local more = ((usable(KEYS[1], 'list') and redis.call('LLEN', KEYS[1]) > 0)
              or (usable(KEYS[3], 'zset') and redis.call('ZCARD', KEYS[3]) > 0))
             and not (max_running and redis.call('SCARD', KEYS[7]) >= max_running)
             and not (rate and usable(A[5], 'zset') and redis.call('ZCARD', A[5]) >= rate)
return cjson.encode({id, 'ok', started, more and 1 or 0})
