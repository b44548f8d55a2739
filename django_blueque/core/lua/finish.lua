-- finish: record the end of a run (blueque 1.0's complete and fail transactions, extended).
-- A failure is retried when the task allows it: it goes back to the scheduled set with
-- eta = now + backoff * 2^(attempts - 1) (to pending at once when backoff is 0). Policy fields
-- the task hash lacks (a foreign producer's task) come from the queue's defaults.
-- Outcome 'requeue': the run never began (its process died before it was handed the task):
-- the task goes back to the queue and the attempt is not counted.
-- With a token, only the holder of the current reservation may finish the task; without one
-- (blueque 1.0 API, tasks started by blueque 1.0) the task must be reserved or started.
-- Retry times and expiries are on Redis's clock; 'updated' and 'finished' on the caller's,
-- as blueque 1.0 writes them.
-- KEYS[1] task, KEYS[2] reserved list, KEYS[3] started set, KEYS[4] lease key,
-- KEYS[5] complete list, KEYS[6] failed list, KEYS[7] scheduled set, KEYS[8] pending list
-- (KEYS[13..15]: the rest of the queue's waiting keys, Keys.waiting)
-- ARGV[1] id, ARGV[2] token or '', ARGV[3] started member, ARGV[4] now, ARGV[5] outcome
-- ('complete', 'failed' or 'requeue'), ARGV[6] result or error, ARGV[7] error type,
-- ARGV[8] traceback, ARGV[9] '1' if a failure may be retried, ARGV[10] default retention (s)
-- or '', ARGV[11] '1' for the reaper's recovery: only while the lease key is absent (the
-- task's process may have taken its lapsed lease again since the reaper looked; see
-- renew_lease), ARGV[12] default retries or '', ARGV[13] default backoff (s) or '',
-- ARGV[16] queue, ARGV[17] the error's code or '', ARGV[18] most entries the errors list
-- keeps (each failure, retried or not, appends one: see record_error); KEYS[18] the task's
-- dependents set (Keys.dependents); KEYS[16] unique hash (a
-- unique task's key is freed when it ends for good), KEYS[17] and ARGV[19] the queue's
-- failed-by-type index (error types set, per-type key prefix); KEYS[10] due index, KEYS[11] lease index, KEYS[12] expiring index (each kept
-- when usable; KEYS[9], ARGV[14] and ARGV[15]: the throughput counter at the end)
-- ARGV[20] the caller's id for this end, the same on each try, or '': an end recorded under
-- it (field ended_by: '<id> <outcome>'), whose reply was lost, is answered again, not 'stale'.
-- ARGV[21] Keys.dependency_templates: an end for good settles the task's dependents
-- (depends.lib), a success counting down, a failure cancelling them
-- KEYS[19..23] Keys.admission's: the run's end frees its slot (admission.lib's free_slot)
-- ARGV[22], ARGV[23]: the run's peak memory (bytes) and CPU seconds, or '': appended to the
-- task's `usage` (a JSON list, newest last, garbage there replaced) when the run holding the
-- lease ends
-- Returns 'complete', 'failed', 'retry', 'requeued' or 'stale' (nothing changed); 'complete
-- settling' or 'failed settling' when dependents are left to settle.lua.
--#include common.lib
--#include admin.lib
--#include depends.lib
--#include admission.lib
if ARGV[5] == 'failed' then
  here({ARGV[19] .. ARGV[7]})
end
local status = status_of(KEYS[1])
if status ~= 'started' and status ~= 'reserved' then
  local end_id = ARGV[20] or ''
  local ended = status and end_id ~= '' and redis.call('HGET', KEYS[1], 'ended_by')
  if ended and string.sub(ended, 1, #end_id + 1) == end_id .. ' ' then
    return string.sub(ended, #end_id + 2)
  end
  return 'stale'
end
local state = redis.call('HMGET', KEYS[1], 'lease', 'attempts', 'retries', 'backoff', 'retention',
                        'priority', 'unique_key')
local waiting = {KEYS[8], KEYS[13], KEYS[14], KEYS[15]}
if ARGV[2] ~= '' and state[1] ~= ARGV[2] then
  return 'stale'
end
if ARGV[11] == '1' and redis.call('EXISTS', KEYS[4]) == 1 then
  return 'stale'
end
if not (usable(KEYS[2], 'list') and usable(KEYS[3], 'set') and usable(KEYS[5], 'list')
        and usable(KEYS[6], 'list') and usable(KEYS[7], 'zset') and usable(KEYS[8], 'list')) then
  return redis.error_reply('cannot finish ' .. ARGV[1] .. ': a key of its queue holds the wrong type')
end
-- Append a run's resources to the task's usage, keeping the last `kept`.
local function append_usage(task_key, peak_memory, cpu, time, kept)
  local ok, runs = pcall(cjson.decode, redis.call('HGET', task_key, 'usage') or '[]')
  if not ok or type(runs) ~= 'table' or (next(runs) ~= nil and #runs == 0) then
    runs = {}
  end
  table.insert(runs, {attempt = number(redis.call('HGET', task_key, 'attempts'), 1),
                      peak_memory = tonumber(peak_memory), cpu = tonumber(cpu),
                      time = tonumber(time)})
  while #runs > tonumber(kept) do
    table.remove(runs, 1)
  end
  redis.call('HSET', task_key, 'usage', cjson.encode(runs))
end

local id, now, outcome = ARGV[1], ARGV[4], ARGV[5]
if (ARGV[22] or '') ~= '' and status == 'started' and state[1] == ARGV[2] then
  append_usage(KEYS[1], ARGV[22], ARGV[23], ARGV[4], ARGV[18])
end
local function ended(result)
  if (ARGV[20] or '') ~= '' then
    redis.call('HSET', KEYS[1], 'ended_by', ARGV[20] .. ' ' .. result)
  end
  return result
end
local attempts = number(state[2], 0)
redis.call('LREM', KEYS[2], 1, id)
redis.call('SREM', KEYS[3], ARGV[3])
redis.call('DEL', KEYS[4])
free_slot({KEYS[19], KEYS[20], KEYS[21], KEYS[22], KEYS[23]}, KEYS[1], id,
          dependency_keys(ARGV[21]).task, waiting)
local function index(key, ...)
  if usable(key, 'zset') then
    redis.call(...)
  end
end
index(KEYS[11], 'ZREM', KEYS[11], id)

-- Append this failure to the task's error history (a JSON list, oldest first; a value that is
-- not such a list, written by someone else, is started again).
local function record_error(attempt)
  local ok, errors = pcall(cjson.decode, redis.call('HGET', KEYS[1], 'errors') or '[]')
  if not ok or type(errors) ~= 'table' or (next(errors) ~= nil and errors[1] == nil) then
    errors = {}
  end
  errors[#errors + 1] = {type = ARGV[7], message = ARGV[6], code = ARGV[17], time = tonumber(now),
                         node = redis.call('HGET', KEYS[1], 'node') or '', attempt = attempt,
                         traceback = ARGV[8]}
  while #errors > tonumber(ARGV[18]) do
    table.remove(errors, 1)
  end
  redis.call('HSET', KEYS[1], 'errors', cjson.encode(errors))
  -- the dashboard's most frequent errors: a count per minute and type beside the throughput
  if KEYS[9] then
    redis.pcall('HINCRBY', KEYS[9], ARGV[14] .. ':error:' .. ARGV[7], 1)
    redis.pcall('EXPIRE', KEYS[9], ARGV[15])
  end
end
redis.call('HDEL', KEYS[1], 'lease', 'cancel_requested')
-- the run's progress goes with it when its task waits again; its start stays as the last
-- attempt's (Django's last_attempted_at), unless the run never began (requeue)
local PROGRESS_FIELDS = {'progress', 'progress_message'}

if outcome == 'requeue' then
  if status == 'started' and attempts > 0 then
    redis.call('HSET', KEYS[1], 'attempts', attempts - 1)
  end
  redis.call('HDEL', KEYS[1], 'node', 'pid', 'started', unpack(PROGRESS_FIELDS))
  redis.call('HSET', KEYS[1], 'status', 'pending', 'updated', now)
  make_pending(waiting, id, state[6], true)
  return 'requeued'
end
if outcome == 'complete' then
  redis.call('HDEL', KEYS[1], 'error_type', 'traceback')
  redis.call('HSET', KEYS[1], 'status', 'complete', 'result', ARGV[6], 'updated', now, 'finished', now)
else
  if status == 'reserved' or attempts == 0 then
    -- died before starting: count the attempt, or a crash-at-start would retry forever;
    -- started by blueque 1.0, which does not count runs: this run was the first
    attempts = attempts + 1
    redis.call('HSET', KEYS[1], 'attempts', attempts)
  end
  record_error(attempts)
  local retries = number(state[3], number(ARGV[12], 0))
  if ARGV[9] == '1' and attempts <= retries then
    local backoff = math.max(number(state[4], number(ARGV[13], 0)), 0)
    redis.call('HSET', KEYS[1], 'last_error', ARGV[6], 'error_type', ARGV[7], 'traceback', ARGV[8],
               'updated', now)
    redis.call('HDEL', KEYS[1], unpack(PROGRESS_FIELDS))
    if backoff > 0 then
      local eta = server_time() + backoff * 2 ^ (math.max(attempts, 1) - 1)
      redis.call('HSET', KEYS[1], 'status', 'scheduled', 'eta', string.format('%.6f', eta))
      redis.call('ZADD', KEYS[7], eta, id)
      index(KEYS[10], 'ZADD', KEYS[10], 'LT', eta, ARGV[16])
    else
      redis.call('HSET', KEYS[1], 'status', 'pending')
      make_pending(waiting, id, state[6], true)
    end
    return ended('retry')
  end
  redis.call('HSET', KEYS[1], 'status', 'failed', 'error', ARGV[6], 'error_type', ARGV[7],
             'traceback', ARGV[8], 'updated', now, 'finished', now)
  index_failure(KEYS[17], ARGV[19], ARGV[7], id, tonumber(now))
end

release_unique(KEYS[16], state[7], id)
local retention = number(state[5], number(ARGV[10], nil))
if retention then
  local expires = server_time() + retention
  redis.call('HSET', KEYS[1], 'expires', string.format('%.6f', expires))
  index(KEYS[12], 'ZADD', KEYS[12], 'LT', expires,
        (outcome == 'complete' and 'complete' or 'failed') .. ' ' .. ARGV[16])
end
-- throughput: one count per queue, minute and end in the hour's hash (KEYS[9], ARGV[14] the
-- minute, ARGV[15] its expiry in s); pcall: a counter of the wrong type never fails an end
if KEYS[9] then
  redis.pcall('HINCRBY', KEYS[9], ARGV[14] .. ':' .. outcome, 1)
  redis.pcall('EXPIRE', KEYS[9], ARGV[15])
end
if outcome == 'complete' then
  redis.call('LPUSH', KEYS[5], id)
else
  redis.call('LPUSH', KEYS[6], id)
end
local result = ended(outcome)
if redis.call('EXISTS', KEYS[18]) == 1
    and settle_dependents(dependency_keys(ARGV[21]), id, outcome == 'complete', now) then
  return result .. ' settling'
end
return result
