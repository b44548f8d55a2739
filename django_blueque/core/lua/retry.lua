-- retry: put a failed task back at the head of its queue (an operator's decision, so it does
-- not count against the task's retries). The id is taken out of the failed list only within a
-- window of either end (see admin.lib's unlist); a task deeper in a longer list is left alone
-- (-1): the bulk "retry all failed" job is the way to reach it without stalling Redis.
-- KEYS[1] task, KEYS[2] failed list, KEYS[3..6] the queue's waiting keys (Keys.waiting),
-- KEYS[7] and ARGV[4] the queue's failed-by-type index (error types set, per-type key prefix)
-- ARGV[1] id, ARGV[2] now, ARGV[3] window
-- ARGV[5] Keys.dependency_templates: a task that still has dependencies to wait for goes
-- back to waiting, not to its queue; the tasks its failure cancelled go back to waiting too
-- (depends.lib)
-- Returns 1 (retried), 0 (not failed any more) or -1 (too deep in its list).
--#include common.lib
--#include admin.lib
--#include depends.lib
expect(KEYS[1], 'hash')
expect(KEYS[2], 'list')
expect(KEYS[3], 'list')
if redis.call('HGET', KEYS[1], 'status') ~= 'failed' then
  return 0
end
local K = dependency_keys(ARGV[5])
local blocked = number(redis.call('HGET', KEYS[1], 'waiting_for'), 0) > 0
if blocked then
  expect(K.waiting_tasks(redis.call('HGET', KEYS[1], 'queue') or ''), 'zset')
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
if blocked then
  local queue = redis.call('HGET', KEYS[1], 'queue') or ''
  redis.call('HSET', KEYS[1], 'status', 'waiting')
  redis.call('HDEL', KEYS[1], 'blocked_by')
  redis.call('ZADD', K.waiting_tasks(queue), tonumber(ARGV[2]), ARGV[1])
else
  make_pending({KEYS[3], KEYS[4], KEYS[5], KEYS[6]}, ARGV[1],
               redis.call('HGET', KEYS[1], 'priority'), true)
end
revive_dependents(K, ARGV[1], ARGV[2], tonumber(ARGV[3]))
return 1
