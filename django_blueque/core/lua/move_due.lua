-- move_due: move a queue's due scheduled tasks to its pending list, in one step, so that any
-- number of schedulers can run at once with no task moved twice and none lost.
-- KEYS[1] scheduled set, KEYS[2] pending list
-- ARGV[1] now, ARGV[2] task key prefix, ARGV[3] most tasks to move in one call
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[3])
local moved = {}
for _, id in ipairs(ids) do
  redis.call('ZREM', KEYS[1], id)
  local task = ARGV[2] .. id
  if redis.call('HGET', task, 'status') == 'scheduled' then
    redis.call('LPUSH', KEYS[2], id)
    redis.call('HSET', task, 'status', 'pending', 'updated', ARGV[1])
    table.insert(moved, id)
  end
end
return moved
