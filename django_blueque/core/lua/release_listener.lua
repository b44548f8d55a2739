-- release_listener: a listener leaves one queue, by its own clean stop or because the reaper
-- found it dead. Whoever removes it from the listeners set owns the release (blueque 1.0's
-- claim_orphan uses the same guard); anyone else gets false.
-- Every task in its reserved list that had not started goes back to the head of the queue.
-- Started tasks are returned for the caller to check: those whose process still holds its
-- lease keep running (they record their own end); the others are recovered by the caller.
-- KEYS[1] listeners set, KEYS[2] queues zset, KEYS[3] listener leases zset, KEYS[4] reserved
-- list, KEYS[5] pending list
-- ARGV[1] listener id, ARGV[2] queue, ARGV[3] task key prefix, ARGV[4] now,
-- ARGV[5] '1' to release even if someone else removed the listener (own clean stop)
local removed = redis.call('SREM', KEYS[1], ARGV[1])
if removed == 1 then
  redis.call('ZINCRBY', KEYS[2], -1, ARGV[2])
elseif ARGV[5] ~= '1' then
  redis.call('ZREM', KEYS[3], ARGV[1])
  return false
end
redis.call('ZREM', KEYS[3], ARGV[1])
local requeued, started = {}, {}
for _, id in ipairs(redis.call('LRANGE', KEYS[4], 0, -1)) do
  local task = ARGV[3] .. id
  local status = redis.call('HGET', task, 'status')
  if status == 'reserved' or status == 'pending' then
    redis.call('LREM', KEYS[4], 1, id)
    redis.call('HDEL', task, 'node', 'lease')
    redis.call('HSET', task, 'status', 'pending', 'updated', ARGV[4])
    redis.call('RPUSH', KEYS[5], id)
    table.insert(requeued, id)
  elseif status == 'started' then
    table.insert(started, id)
  else
    redis.call('LREM', KEYS[4], 1, id)
  end
end
return {requeued, started}
