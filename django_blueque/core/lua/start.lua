-- start: the task's process takes over a task its listener reserved, and gets its fields
-- (HGETALL: no second round trip to read the task it runs). Refused (0) when the
-- reservation is no longer this one (reaped and handed to someone else). A task whose
-- cancellation was asked while it was reserved fails here, without running (-1).
-- A task found 'pending' with this listener's node and token was reserved before its producer
-- wrote its hash (see reserve): it is ours.
-- KEYS[1] task, KEYS[2] started set, KEYS[3] lease key, KEYS[4] reserved list, KEYS[5] failed list,
-- KEYS[6] lease index (task id -> lease expiry; skipped when it holds the wrong type),
-- KEYS[7] unique hash (a unique task frees its key here unless unique_until is 'end'),
-- KEYS[8] and ARGV[8] the queue's failed-by-type index (error types set, per-type key prefix)
-- ARGV[1] task id, ARGV[2] started member "<listener> <pid> <id>", ARGV[3] pid, ARGV[4] token,
-- ARGV[5] now, ARGV[6] lease ttl (ms), ARGV[7] listener id
--#include common.lib
if redis.call('TYPE', KEYS[1]).ok ~= 'hash' then
  return 0
end
local state = redis.call('HMGET', KEYS[1], 'status', 'lease', 'cancel_requested', 'node', 'attempts',
                        'unique_key', 'unique_until')
local ours = state[1] == 'reserved' or (state[1] == 'pending' and state[4] == ARGV[7])
if not ours or state[2] ~= ARGV[4] then
  return 0
end
if not (usable(KEYS[2], 'set') and usable(KEYS[3], 'string') and usable(KEYS[4], 'list')
        and usable(KEYS[5], 'list')) then
  return redis.error_reply('cannot start ' .. ARGV[1] .. ': a key of its queue holds the wrong type')
end
if state[3] then
  redis.call('LREM', KEYS[4], 1, ARGV[1])
  redis.call('HDEL', KEYS[1], 'lease', 'cancel_requested')
  fail_cancelled(KEYS[1], ARGV[1], ARGV[5], {KEYS[5], KEYS[7], KEYS[8]}, ARGV[8])
  return -1
end
if state[7] ~= 'end' then
  release_unique(KEYS[7], state[6], ARGV[1])
end
redis.call('SADD', KEYS[2], ARGV[2])
redis.call('HSET', KEYS[1], 'status', 'started', 'pid', ARGV[3], 'updated', ARGV[5], 'started', ARGV[5],
           'attempts', number(state[5], 0) + 1)
redis.call('HDEL', KEYS[1], 'progress', 'progress_message')
redis.call('SET', KEYS[3], ARGV[4], 'PX', ARGV[6])
-- the lease index is the reaper's shortcut, shared by every queue: garbage there must not stop
-- them all (the reaper's sweep of the started sets finds what the index misses)
if usable(KEYS[6], 'zset') then
  redis.call('ZADD', KEYS[6], server_time() + tonumber(ARGV[6]) / 1000, ARGV[1])
end
return redis.call('HGETALL', KEYS[1])
