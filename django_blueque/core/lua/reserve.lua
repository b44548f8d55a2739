-- reserve: take the oldest pending task and mark it reserved by this listener, in one step
-- (blueque 1.0 does RPOPLPUSH, then HSET, and a crash between them strands the task).
-- An id whose task key holds something else than a hash, or whose task is not pending, is
-- dropped (never run) and reported. An id with no hash yet is reserved as blueque 1.0 does
-- (a producer may push the id before it writes the hash; its HSET leaves node and lease be).
-- Tasks with a priority wait in the prioritized set (see make_pending): its first is taken
-- before the list's oldest when its priority is above 0, after it otherwise. The wake list
-- is emptied once the set is, so a listener's peek on it blocks again.
-- A listener beats rarely while idle, on a long lease (see IDLE_HEARTBEAT_TTL): the task it
-- takes brings that lease down to the busy one, here, so that a listener dying with a task
-- reserved is found as soon as a busy one (XX: only a registered listener; LT: never longer).
-- KEYS[1] pending list, KEYS[2] the listener's reserved list, KEYS[3] prioritized set,
-- KEYS[4] its wake list, KEYS[5] the queue's listener leases, KEYS[6] the listener expiries index
-- ARGV[1] task key prefix, ARGV[2] listener id, ARGV[3] now, ARGV[4] lease token, ARGV[5] queue,
-- ARGV[6] the busy listener lease (s)
-- Returns false when the queue is empty, {id, 'ok', timeout or ''}, or {id, 'skipped', why}.
--#include common.lib
local first = usable(KEYS[3], 'zset') and redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES') or {}
local id
if first[1] and (tonumber(first[2]) < 0 or redis.call('LLEN', KEYS[1]) == 0) then
  if not usable(KEYS[2], 'list') then
    return redis.error_reply('cannot reserve from ' .. ARGV[5] .. ': the reserved list of ' .. ARGV[2] .. ' holds the wrong type')
  end
  id = first[1]
  redis.call('ZREM', KEYS[3], id)
  redis.call('LPUSH', KEYS[2], id)
else
  id = redis.call('RPOPLPUSH', KEYS[1], KEYS[2])
end
if not first[1] or (id == first[1] and redis.call('ZCARD', KEYS[3]) == 0) then
  redis.call('DEL', KEYS[4])
end
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
-- (pcall: a lease key of the wrong type is the heartbeat's to report, not a reason to drop this)
local expiry = server_time() + tonumber(ARGV[6])
redis.pcall('ZADD', KEYS[5], 'XX', 'LT', expiry, ARGV[2])
redis.pcall('ZADD', KEYS[6], 'XX', 'LT', expiry, ARGV[5] .. ' ' .. ARGV[2])
return {id, 'ok', redis.call('HGET', task, 'timeout') or ''}
