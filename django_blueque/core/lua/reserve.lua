-- reserve: take the oldest pending task and mark it reserved by this listener, in one step
-- (blueque 1.0 does RPOPLPUSH, then HSET, and a crash between them strands the task).
-- An id whose task key holds something else than a hash, or whose task is not pending, is
-- dropped (never run) and reported. An id with no hash yet is reserved as blueque 1.0 does
-- (a producer may push the id before it writes the hash; its HSET leaves node and lease be).
-- KEYS[1] pending list, KEYS[2] the listener's reserved list
-- ARGV[1] task key prefix, ARGV[2] listener id, ARGV[3] now, ARGV[4] lease token, ARGV[5] queue
-- Returns false when the queue is empty, {id, 'ok', timeout or ''}, or {id, 'skipped', why}.
--#include common.lib
local id = redis.call('RPOPLPUSH', KEYS[1], KEYS[2])
if not id then
  return false
end
local task = ARGV[1] .. id
local kind = redis.call('TYPE', task).ok
if kind ~= 'hash' and kind ~= 'none' then
  redis.call('LREM', KEYS[2], 1, id)
  return {id, 'skipped', 'its task key holds a ' .. kind .. ', not a hash'}
end
if kind == 'hash' then
  local status = redis.call('HGET', task, 'status')
  if status ~= 'pending' then
    redis.call('LREM', KEYS[2], 1, id)
    return {id, 'skipped', 'its status is ' .. (status or 'missing') .. ', not pending'}
  end
end
redis.call('HSET', task, 'status', 'reserved', 'node', ARGV[2], 'updated', ARGV[3], 'lease', ARGV[4])
redis.call('HSETNX', task, 'queue', ARGV[5])
-- a blueque 1.0 reclaim of an earlier run no longer applies to this one
redis.call('HDEL', task, 'reclaimed_node')
return {id, 'ok', redis.call('HGET', task, 'timeout') or ''}
