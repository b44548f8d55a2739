-- cancel: stop a task wherever it is. A pending or scheduled task fails at once with the
-- error 'cancelled'; a reserved or started one is flagged, and its listener is told (through
-- its cancels set) to stop the process; the listener then records the failure.
-- KEYS[1] task, KEYS[2] pending list, KEYS[3] scheduled set, KEYS[4] failed list
-- ARGV[1] id, ARGV[2] now, ARGV[3] cancels-set key prefix (the node is read from the task)
-- Returns 'cancelled', 'requested', the status of a finished task, or false if there is none.
local status = redis.call('HGET', KEYS[1], 'status')
if not status then
  return false
end
local now = ARGV[2]
if status == 'pending' or status == 'scheduled' then
  if status == 'pending' then
    redis.call('LREM', KEYS[2], 0, ARGV[1])
  else
    redis.call('ZREM', KEYS[3], ARGV[1])
  end
  redis.call('HSET', KEYS[1], 'status', 'failed', 'error', 'cancelled', 'error_type', 'Cancelled',
             'updated', now, 'finished', now)
  redis.call('LPUSH', KEYS[4], ARGV[1])
  return 'cancelled'
end
if status == 'reserved' or status == 'started' then
  redis.call('HSET', KEYS[1], 'cancel_requested', now)
  local node = redis.call('HGET', KEYS[1], 'node')
  if node then
    redis.call('SADD', ARGV[3] .. node, ARGV[1])
  end
  return 'requested'
end
return status
