-- bulk_step: one batch of a bulk job (see bulk_start): up to ARGV[3] ids taken from the tail of
-- the list. A step is atomic and records its progress in the job, so a job interrupted anywhere
-- resumes where it stopped, from any process, and no task is done twice.
-- A task whose status is still the list's state is retried (as retry.lua does, but joining the
-- queue at its back, so a whole list keeps its order and does not jump ahead of the queue) or
-- deleted (as the protocol's delete does); an id without such a task is dropped from the list.
-- The job ends at its newest id. If that task left the list meanwhile (someone retried or
-- deleted it), the job also stops at the first task updated after it started.
-- KEYS[1] job hash, KEYS[2] the list, KEYS[3] pending list
-- ARGV[1] task key prefix, ARGV[2] now, ARGV[3] most ids to take, ARGV[4] seconds to keep the
-- job's record once it ended
-- Returns {status, processed, total, affected}; status is false when there is no such job.
local job = redis.call('HMGET', KEYS[1], 'status', 'action', 'state', 'total', 'processed',
                       'affected', 'marker', 'started')
local status = job[1]
local total, processed, affected = tonumber(job[4]) or 0, tonumber(job[5]) or 0, tonumber(job[6]) or 0
if status ~= 'running' then
  return {status, processed, total, affected}
end
local action, state, marker, started = job[2], job[3], job[7], tonumber(job[8])
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
  local fields = redis.call('HMGET', task, 'status', 'updated', 'error')
  if guard_time and (tonumber(fields[2]) or 0) > started then
    done = true
    break
  end
  redis.call('RPOP', KEYS[2])
  processed = processed + 1
  if fields[1] == state then
    affected = affected + 1
    if action == 'delete' then
      redis.call('DEL', task)
    else
      redis.call('HSET', task, 'status', 'pending', 'updated', now, 'last_error', fields[3] or '')
      redis.call('HDEL', task, 'error', 'error_type', 'traceback', 'finished', 'expires', 'node',
                 'pid')
      redis.call('LPUSH', KEYS[3], id)
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
  redis.call('HSET', KEYS[1], 'finished', now)
  redis.call('EXPIRE', KEYS[1], ARGV[4])
end
return {status, processed, total, affected}
