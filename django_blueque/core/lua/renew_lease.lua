-- renew_lease: the running task's process extends its lease, if it still holds it.
-- A lease that lapsed while the process could not reach Redis (a restart, a partition) is
-- taken again if nobody recovered the task meanwhile: the task is still started under this
-- token. Once the reaper has recovered it (finish clears the token), the lease is lost.
-- KEYS[1] lease key, KEYS[2] task, KEYS[3] lease index
-- ARGV[3] task id
-- ARGV[1] token, ARGV[2] lease ttl (ms)
-- Returns {1, cancel_requested or false} while the lease is held, {0} once it is lost.
--#include common.lib
if redis.call('TYPE', KEYS[2]).ok ~= 'hash' or not usable(KEYS[1], 'string') then
  return {0}
end
local holder = redis.call('GET', KEYS[1])
if holder ~= ARGV[1] then
  if holder then
    return {0}
  end
  local state = redis.call('HMGET', KEYS[2], 'status', 'lease')
  if state[1] ~= 'started' or state[2] ~= ARGV[1] then
    return {0}
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if usable(KEYS[3], 'zset') then
  redis.call('ZADD', KEYS[3], server_time() + tonumber(ARGV[2]) / 1000, ARGV[3])
end
return {1, redis.call('HGET', KEYS[2], 'cancel_requested')}
