-- release_listener: a listener leaves one queue, by its own clean stop or because the reaper
-- found it dead. Whoever removes it from the listeners set owns the release (blueque 1.0's
-- claim_orphan uses the same guard); anyone else gets false.
-- Every task in its reserved list that had not started goes back to the head of the queue.
-- Started tasks are returned for the caller to check: those whose process still holds its
-- lease keep running (they record their own end); the others are recovered by the caller.
-- Ids whose task is missing, finished or not a hash are dropped from the list.
-- KEYS[1] listeners set, KEYS[2] queues zset, KEYS[3] listener leases zset, KEYS[4] reserved
-- list, KEYS[5] pending list, KEYS[6] listener index, KEYS[7..9] the rest of the queue's
-- waiting keys (Keys.waiting)
-- ARGV[1] listener id, ARGV[2] queue, ARGV[3] task key prefix, ARGV[4] now,
-- ARGV[5] '1' to release even if someone else removed the listener (own clean stop),
-- ARGV[6] (optional) a listener claiming the dead one's orphan, as blueque 1.0's claim_orphan:
-- its newest reserved or started task stays where it is, marked reclaimed_node, for the
-- claimer to run or watch, and is returned third instead of being requeued or listed started.
-- Returns {requeued ids, started ids, claimed id or false}.
--#include common.lib
local reserved = usable(KEYS[4], 'list') and redis.call('LRANGE', KEYS[4], 0, -1) or {}
local tasks = {}
for i, id in ipairs(reserved) do
  tasks[i] = ARGV[3] .. id
end
here(tasks)
local removed = 0
if usable(KEYS[1], 'set') then
  removed = redis.call('SREM', KEYS[1], ARGV[1])
end
if usable(KEYS[3], 'zset') then
  redis.call('ZREM', KEYS[3], ARGV[1])
end
if usable(KEYS[6], 'zset') then
  redis.call('ZREM', KEYS[6], ARGV[2] .. ' ' .. ARGV[1])
end
if removed == 1 then
  if usable(KEYS[2], 'zset') then
    redis.call('ZINCRBY', KEYS[2], -1, ARGV[2])
  end
elseif ARGV[5] ~= '1' then
  return false
end
local requeued, started, claimed = {}, {}, false
if not (usable(KEYS[4], 'list') and usable(KEYS[5], 'list')) then
  return {requeued, started, claimed}
end
for _, id in ipairs(reserved) do
  local task = ARGV[3] .. id
  local status = status_of(task)
  if ARGV[6] and not claimed and (status == 'reserved' or status == 'started') then
    redis.call('HSET', task, 'reclaimed_node', ARGV[6])
    claimed = id
  elseif status == 'reserved' or status == 'pending' then
    redis.call('LREM', KEYS[4], 1, id)
    redis.call('HDEL', task, 'node', 'lease')
    redis.call('HSET', task, 'status', 'pending', 'updated', ARGV[4])
    make_pending({KEYS[5], KEYS[7], KEYS[8], KEYS[9]}, id, redis.call('HGET', task, 'priority'),
                 true)
    table.insert(requeued, id)
  elseif status == 'started' then
    table.insert(started, id)
  else
    redis.call('LREM', KEYS[4], 1, id)
  end
end
return {requeued, started, claimed}
