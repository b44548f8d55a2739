-- run_now: an operator sends one scheduled task to its queue before its eta, to be taken next
-- (the tail of the pending list, where retry puts a task). As move_due does, the eta field
-- stays in place.
-- KEYS[1] task, KEYS[2] scheduled set, KEYS[3..6] the queue's waiting keys (Keys.waiting)
-- ARGV[1] id, ARGV[2] now
-- Returns 1, or 0 when the task is not (or no longer) scheduled.
--#include common.lib
--#include admin.lib
expect(KEYS[1], 'hash')
expect(KEYS[2], 'zset')
expect(KEYS[3], 'list')
if redis.call('HGET', KEYS[1], 'status') ~= 'scheduled' then
  return 0
end
if redis.call('ZREM', KEYS[2], ARGV[1]) == 0 then
  return 0
end
redis.call('HSET', KEYS[1], 'status', 'pending', 'updated', ARGV[2])
make_pending({KEYS[3], KEYS[4], KEYS[5], KEYS[6]}, ARGV[1], redis.call('HGET', KEYS[1], 'priority'),
             true)
return 1
