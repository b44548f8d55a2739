-- bulk_step: one batch of a bulk job (see bulk_start): up to ARGV[3] ids taken from the tail of
-- the list. A step is atomic and records its progress in the job, so a job interrupted anywhere
-- resumes where it stopped, from any process, and no task is done twice.
-- A task whose status is still the list's state is retried (as retry.lua does, but joining the
-- queue at its back, so a whole list keeps its order and does not jump ahead of the queue) or
-- deleted (as the protocol's delete does); an id without such a task is dropped from the list.
-- A retry leaves a cancelled task (error_type django_blueque.Cancelled, or 1.0's Cancelled)
-- in the list unless the job was started with 'cancelled' = '1': it moves to the list's head,
-- past the job's end, in O(1).
-- A cancel (of the pending tasks) fails each pending task as cancel.lua does, taking the
-- next to run first; once its list is walked it goes on through the prioritized set, in the
-- order of taking, from a score cursor ('after'), leaving the tasks created after the job
-- started.
-- The job ends at its newest id. If that task left the list meanwhile (someone retried or
-- deleted it), the job also stops at the first task updated after it started.
-- KEYS[1] job hash, KEYS[2] the list, KEYS[3] pending list, KEYS[4] set of running jobs,
-- KEYS[5..7] the rest of the queue's waiting keys (Keys.waiting), KEYS[8] and ARGV[6] the
-- queue's failed-by-type index (error types set, per-type key prefix), KEYS[9] failed list,
-- KEYS[10] unique hash
-- ARGV[1] task key prefix, ARGV[2] now, ARGV[3] most ids to take, ARGV[4] seconds to keep the
-- job's record once it ended, ARGV[5] the job's id, ARGV[7] Keys.dependency_templates: a
-- cancelled task cancels the tasks waiting for it, and a retried task that still has
-- dependencies to wait for goes back to waiting, not to its queue (depends.lib)
-- Returns {status, processed, total, affected}; status is false when there is no such job.
--#include common.lib
--#include admin.lib
--#include depends.lib
expect(KEYS[1], 'hash')
expect(KEYS[2], 'list')
expect(KEYS[3], 'list')
expect(KEYS[4], 'set')
local job = redis.call('HMGET', KEYS[1], 'status', 'action', 'state', 'total', 'processed',
                       'affected', 'marker', 'started', 'cancelled', 'phase', 'after')
local status = job[1]
local total, processed, affected = tonumber(job[4]) or 0, tonumber(job[5]) or 0, tonumber(job[6]) or 0
if status ~= 'running' then
  redis.call('SREM', KEYS[4], ARGV[5])
  return {status, processed, total, affected}
end
local action, state, marker, started = job[2], job[3], job[7], tonumber(job[8])
local keep_cancelled = action == 'retry' and job[9] ~= '1'
local prefix, now = ARGV[1], ARGV[2]
local guard_time = redis.call('HGET', prefix .. marker, 'status') ~= state
local done, phase, after = false, job[10] or 'list', job[11]
local batch = tonumber(ARGV[3])
local cancelled = {KEYS[9], KEYS[10], KEYS[8]}
local K = dependency_keys(ARGV[7])
if action == 'cancel' then
  expect(KEYS[9], 'list')
end
-- the tasks this step may reach (the list's next batch, read here once, and the prioritized
-- set's), and their failed-by-type keys, touched before the first write (see here)
local reach, known = {ARGV[6] .. CANCELLED}, {}
-- a task key that is not a hash is no task of this list: its id is dropped
local function fields_of(task)
  if redis.call('TYPE', task).ok ~= 'hash' then
    return {}
  end
  return redis.call('HMGET', task, 'status', 'updated', 'error', 'error_type', 'workflow')
end
-- the workflows named by the tasks a delete took: the caller deletes the records of those whose
-- tasks are all gone
local workflows, named = {}, {}
for _, id in ipairs((phase == 'list' and batch > 0) and redis.call('LRANGE', KEYS[2], -batch, -1)
                    or {}) do
  local task = prefix .. id
  known[id] = fields_of(task)
  reach[#reach + 1] = task
  reach[#reach + 1] = ARGV[6] .. (known[id][4] or '')
end
if action == 'cancel' and batch > 0 and usable(KEYS[5], 'zset') then
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[5], after and ('(' .. after) or '-inf',
                                 '+inf', 'LIMIT', 0, batch)) do
    reach[#reach + 1] = prefix .. id
  end
end
here(reach)
for _ = 1, (phase == 'list') and batch or 0 do
  batch = batch - 1
  if processed >= total then
    done = true
    break
  end
  local id = redis.call('LINDEX', KEYS[2], -1)
  if not id then
    done = true
    break
  end
  local task = prefix .. id
  local fields = known[id] or fields_of(task)
  if guard_time and (tonumber(fields[2]) or 0) > started then
    done = true
    break
  end
  processed = processed + 1
  if keep_cancelled and fields[1] == state and
      (fields[4] == 'django_blueque.Cancelled' or fields[4] == 'Cancelled') then
    redis.call('RPOPLPUSH', KEYS[2], KEYS[2])
  elseif redis.call('RPOP', KEYS[2]) and fields[1] == state then
    affected = affected + 1
    if state == 'failed' then
      unindex_failure(KEYS[8], ARGV[6], fields[4], id)
    end
    if action == 'delete' then
      redis.call('DEL', task, K.dependents(id))
      if fields[5] and fields[5] ~= '' and not named[fields[5]] then
        named[fields[5]] = true
        workflows[#workflows + 1] = fields[5]
      end
    elseif action == 'cancel' then
      fail_cancelled(task, id, now, cancelled, ARGV[6])
      settle_dependents(K, id, false, now)
    else
      redis.call('HSET', task, 'status', 'pending', 'updated', now, 'last_error', fields[3] or '')
      redis.call('HDEL', task, 'error', 'error_type', 'traceback', 'finished', 'expires', 'node',
                 'pid', 'blocked_by')
      local waiting_index = K.waiting_tasks(redis.call('HGET', task, 'queue') or '')
      if number(redis.call('HGET', task, 'waiting_for'), 0) > 0 and usable(waiting_index, 'zset') then
        redis.call('HSET', task, 'status', 'waiting')
        redis.call('ZADD', waiting_index, tonumber(now), id)
      else
        make_pending({KEYS[3], KEYS[5], KEYS[6], KEYS[7]}, id, redis.call('HGET', task, 'priority'),
                     false)
      end
    end
  end
  if id == marker then
    done = true
    break
  end
end
if action == 'cancel' and (done or phase == 'set') and usable(KEYS[5], 'zset') then
  -- the prioritized set, from where the last step stopped, in the order of taking
  phase, done = 'set', false
  local found = batch > 0 and redis.call('ZRANGEBYSCORE', KEYS[5], after and ('(' .. after) or '-inf',
                                         '+inf', 'WITHSCORES', 'LIMIT', 0, batch) or {}
  for i = 1, #found, 2 do
    local id, task = found[i], prefix .. found[i]
    after = found[i + 1]
    local fields = {}
    if redis.call('TYPE', task).ok == 'hash' then
      fields = redis.call('HMGET', task, 'status', 'created')
    end
    if (tonumber(fields[2]) or 0) <= started then  -- one created meanwhile is left alone
      processed = processed + 1
      redis.call('ZREM', KEYS[5], id)
      if fields[1] == 'pending' then
        affected = affected + 1
        fail_cancelled(task, id, now, cancelled, ARGV[6])
        settle_dependents(K, id, false, now)
      end
    end
  end
  done = batch > 0 and #found / 2 < batch
  redis.call('HSET', KEYS[1], 'phase', 'set')
  if after then
    redis.call('HSET', KEYS[1], 'after', after)
  end
end
status = done and 'done' or 'running'
redis.call('HSET', KEYS[1], 'processed', processed, 'affected', affected, 'updated', now,
           'status', status)
if done then
  redis.call('SREM', KEYS[4], ARGV[5])
  redis.call('HSET', KEYS[1], 'finished', now)
  redis.call('EXPIRE', KEYS[1], ARGV[4])
end
return {status, processed, total, affected, workflows}
