-- reserve: take the oldest pending task and mark it reserved by this listener, in one step
-- (blueque 1.0 does RPOPLPUSH, then HSET, and a crash between them strands the task).
-- KEYS[1] pending list, KEYS[2] the listener's reserved list
-- ARGV[1] task key prefix, ARGV[2] listener id, ARGV[3] now, ARGV[4] lease token
-- Returns false when the queue is empty, {id, "ok", timeout}, or {id, "skipped"} for an id without a
-- pending task behind it (deleted, cancelled or garbage), which is dropped, never run.
local id = redis.call('RPOPLPUSH', KEYS[1], KEYS[2])
if not id then
  return false
end
local task = ARGV[1] .. id
if redis.call('HGET', task, 'status') ~= 'pending' then
  redis.call('LREM', KEYS[2], 1, id)
  return {id, 'skipped'}
end
redis.call('HSET', task, 'status', 'reserved', 'node', ARGV[2], 'updated', ARGV[3], 'lease', ARGV[4])
-- a blueque 1.0 reclaim of an earlier run no longer applies to this one
redis.call('HDEL', task, 'reclaimed_node')
return {id, 'ok', redis.call('HGET', task, 'timeout') or ''}
