-- retry: put a failed task back at the head of its queue (an operator's decision, so it does
-- not count against the task's retries). The id is taken out of the failed list only within a
-- window of either end (see admin.lib's unlist); a task deeper in a longer list is left alone
-- (-1): the bulk "retry all failed" job is the way to reach it without stalling Redis.
-- KEYS[1] task, KEYS[2] failed list, KEYS[3..6] the queue's waiting keys (Keys.waiting),
-- KEYS[7] and ARGV[4] the queue's failed-by-type index (error types set, per-type key prefix)
-- ARGV[1] id, ARGV[2] now, ARGV[3] window
-- Returns 1 (retried), 0 (not failed any more) or -1 (too deep in its list).
--#include common.lib
--#include admin.lib
expect(KEYS[1], 'hash')
expect(KEYS[2], 'list')
expect(KEYS[3], 'list')
if redis.call('HGET', KEYS[1], 'status') ~= 'failed' then
  return 0
end
local error_type = redis.call('HGET', KEYS[1], 'error_type')
here({ARGV[4] .. (error_type or '')})
if unlist(KEYS[2], ARGV[1], tonumber(ARGV[3])) == 'deep' then
  return -1
end
unindex_failure(KEYS[7], ARGV[4], error_type, ARGV[1])
redis.call('HSET', KEYS[1], 'status', 'pending', 'updated', ARGV[2], 'last_error',
           redis.call('HGET', KEYS[1], 'error') or '')
redis.call('HDEL', KEYS[1], 'error', 'error_type', 'traceback', 'finished', 'expires', 'node', 'pid')
make_pending({KEYS[3], KEYS[4], KEYS[5], KEYS[6]}, ARGV[1], redis.call('HGET', KEYS[1], 'priority'),
             true)
return 1
