-- retry: put a failed task back at the head of its queue (an operator's decision, so it does
-- not count against the task's retries).
-- KEYS[1] task, KEYS[2] failed list, KEYS[3] pending list
-- ARGV[1] id, ARGV[2] now
if redis.call('HGET', KEYS[1], 'status') ~= 'failed' then
  return 0
end
redis.call('LREM', KEYS[2], 1, ARGV[1])
redis.call('HSET', KEYS[1], 'status', 'pending', 'updated', ARGV[2], 'last_error',
           redis.call('HGET', KEYS[1], 'error') or '')
redis.call('HDEL', KEYS[1], 'error', 'error_type', 'traceback', 'finished', 'expires', 'node', 'pid')
redis.call('RPUSH', KEYS[3], ARGV[1])
return 1
