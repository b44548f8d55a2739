-- delete_finished: the protocol's delete (DEL task; LREM complete|failed) of one finished task
-- an operator chose, only if it is still finished. As retry.lua, the id is taken out of its
-- list only within a window of either end; a task deeper in a longer list is left alone (-1):
-- the bulk "delete all" job reaches it without stalling Redis.
-- KEYS[1] task, KEYS[2] complete list, KEYS[3] failed list, KEYS[4] and ARGV[3] the queue's
-- failed-by-type index (error types set, per-type key prefix)
-- KEYS[5] the task's dependents set (deleted with it)
-- ARGV[1] id, ARGV[2] window
-- Returns {1 (deleted), 0 (not finished) or -1 (too deep in its list), the task's workflow id
-- or ''}: the caller deletes that workflow's record if its tasks are all gone.
--#include common.lib
--#include admin.lib
expect(KEYS[1], 'hash')
local status, workflow = unpack(redis.call('HMGET', KEYS[1], 'status', 'workflow'))
local list = (status == 'complete' and KEYS[2]) or (status == 'failed' and KEYS[3]) or nil
if not list then
  return {0, ''}
end
expect(list, 'list')
local error_type = redis.call('HGET', KEYS[1], 'error_type')
here({ARGV[3] .. (error_type or '')})
if unlist(list, ARGV[1], tonumber(ARGV[2])) == 'deep' then
  return {-1, ''}
end
if status == 'failed' then
  unindex_failure(KEYS[4], ARGV[3], error_type, ARGV[1])
end
redis.call('DEL', KEYS[1], KEYS[5])
return {1, workflow or ''}
