-- bulk_step: one batch of a bulk job (see bulk_start): up to ARGV[3] ids taken from the tail of
-- the list. A step is atomic and records its progress in the job, so a job interrupted anywhere
-- resumes where it stopped, from any process, and no task is done twice.
-- A task whose status is still the list's state is retried (as retry.lua does, but joining the
-- queue at its back, so a whole list keeps its order and does not jump ahead of the queue) or
-- deleted (as the protocol's delete does); an id without such a task is dropped from the list.
-- A retry leaves a cancelled task (error_type django_blueque.Cancelled, or 1.0's Cancelled)
-- in the list unless the job was started with 'cancelled' = '1': it moves to the list's head,
-- past the job's end, in O(1).
-- The job ends at its newest id. If that task left the list meanwhile (someone retried or
-- deleted it), the job also stops at the first task updated after it started.
-- KEYS[1] job hash, KEYS[2] the list, KEYS[3] pending list, KEYS[4] set of running jobs,
-- KEYS[5..7] the rest of the queue's waiting keys (Keys.waiting), KEYS[8] and ARGV[6] the
-- queue's failed-by-type index (error types set, per-type key prefix)
-- ARGV[1] task key prefix, ARGV[2] now, ARGV[3] most ids to take, ARGV[4] seconds to keep the
-- job's record once it ended, ARGV[5] the job's id
-- Returns {status, processed, total, affected}; status is false when there is no such job.
--#include common.lib
--#include admin.lib
expect(KEYS[1], 'hash')
expect(KEYS[2], 'list')
expect(KEYS[3], 'list')
expect(KEYS[4], 'set')
local job = redis.call('HMGET', KEYS[1], 'status', 'action', 'state', 'total', 'processed',
                       'affected', 'marker', 'started', 'cancelled')
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
local done = false
for _ = 1, tonumber(ARGV[3]) do
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
  local fields = {}  -- a task key that is not a hash is no task of this list: its id is dropped
  if redis.call('TYPE', task)['ok'] == 'hash' then
    fields = redis.call('HMGET', task, 'status', 'updated', 'error', 'error_type')
  end
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
      redis.call('DEL', task)
    else
      redis.call('HSET', task, 'status', 'pending', 'updated', now, 'last_error', fields[3] or '')
      redis.call('HDEL', task, 'error', 'error_type', 'traceback', 'finished', 'expires', 'node',
                 'pid')
      make_pending({KEYS[3], KEYS[5], KEYS[6], KEYS[7]}, id, redis.call('HGET', task, 'priority'),
                   false)
    end
  end
  if id == marker then
    done = true
    break
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
return {status, processed, total, affected}
