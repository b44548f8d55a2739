-- finish: record the end of a run (blueque 1.0's complete and fail transactions, extended).
-- A failure is retried when the task allows it: it goes back to the scheduled set with
-- eta = now + backoff * 2^(attempts - 1) (to pending at once when backoff is 0).
-- With a token, only the holder of the current reservation may finish the task; without one
-- (blueque 1.0 API, tasks started by blueque 1.0) the task must be reserved or started.
-- KEYS[1] task, KEYS[2] reserved list, KEYS[3] started set, KEYS[4] lease key,
-- KEYS[5] complete list, KEYS[6] failed list, KEYS[7] scheduled set, KEYS[8] pending list
-- ARGV[1] id, ARGV[2] token or '', ARGV[3] started member, ARGV[4] now, ARGV[5] outcome
-- ('complete' or 'failed'), ARGV[6] result or error, ARGV[7] error type, ARGV[8] traceback,
-- ARGV[9] '1' if a failure may be retried, ARGV[10] default retention in seconds or '',
-- ARGV[11] '1' for the reaper's recovery: only while the lease key is absent (the task's
-- process may have taken its lapsed lease again since the reaper looked; see renew_lease)
-- Returns 'complete', 'failed', 'retry' or 'stale' (nothing changed).
local state = redis.call('HMGET', KEYS[1], 'status', 'lease', 'attempts', 'retries', 'backoff', 'retention')
local status = state[1]
if status ~= 'started' and status ~= 'reserved' then
  return 'stale'
end
if ARGV[2] ~= '' and state[2] ~= ARGV[2] then
  return 'stale'
end
if ARGV[11] == '1' and redis.call('EXISTS', KEYS[4]) == 1 then
  return 'stale'
end
local id, now = ARGV[1], ARGV[4]
redis.call('LREM', KEYS[2], 1, id)
redis.call('SREM', KEYS[3], ARGV[3])
redis.call('DEL', KEYS[4])
redis.call('HDEL', KEYS[1], 'lease', 'cancel_requested')

if ARGV[5] == 'complete' then
  redis.call('HDEL', KEYS[1], 'error_type', 'traceback')
  redis.call('HSET', KEYS[1], 'status', 'complete', 'result', ARGV[6], 'updated', now, 'finished', now)
else
  local attempts = tonumber(state[3]) or 0
  if status == 'reserved' or attempts == 0 then
    -- died before starting: count the attempt, or a crash-at-start would retry forever;
    -- started by blueque 1.0, which does not count runs: this run was the first
    attempts = attempts + 1
    redis.call('HSET', KEYS[1], 'attempts', attempts)
  end
  local retries = tonumber(state[4]) or 0
  if ARGV[9] == '1' and attempts <= retries then
    local backoff = tonumber(state[5]) or 0
    local eta = tonumber(now) + backoff * 2 ^ (math.max(attempts, 1) - 1)
    redis.call('HSET', KEYS[1], 'last_error', ARGV[6], 'error_type', ARGV[7], 'traceback', ARGV[8],
               'updated', now)
    if backoff > 0 then
      redis.call('HSET', KEYS[1], 'status', 'scheduled', 'eta', string.format('%.6f', eta))
      redis.call('ZADD', KEYS[7], eta, id)
    else
      redis.call('HSET', KEYS[1], 'status', 'pending')
      redis.call('RPUSH', KEYS[8], id)
    end
    return 'retry'
  end
  redis.call('HSET', KEYS[1], 'status', 'failed', 'error', ARGV[6], 'error_type', ARGV[7],
             'traceback', ARGV[8], 'updated', now, 'finished', now)
end

local retention = tonumber(state[6]) or tonumber(ARGV[10])
if retention then
  redis.call('HSET', KEYS[1], 'expires', string.format('%.6f', tonumber(now) + retention))
end
if ARGV[5] == 'complete' then
  redis.call('LPUSH', KEYS[5], id)
  return 'complete'
end
redis.call('LPUSH', KEYS[6], id)
return 'failed'
