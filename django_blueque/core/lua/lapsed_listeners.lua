-- lapsed_listeners: the listeners of the listener index whose heartbeat has lapsed, for the
-- reaper to watch; a pass costs what has lapsed, not what is registered. Upkeep on the way:
-- an entry whose listener has left its queue's leases and listeners set is removed; one whose
-- queue lease is later than the index says gets that expiry.
-- KEYS[1] listener index (a WRONGTYPE error when it is not a sorted set)
-- ARGV[1] listeners-set key prefix, ARGV[2] listener-leases key prefix, ARGV[3] most entries,
-- ARGV[4] '1' for a dry run (nothing written), ARGV[5] what follows the queue name in those
-- keys ('}' in cluster mode, see Keys.around)
-- Returns {{queue, listener id, heartbeat expiry or ''}, ...}.
--#include common.lib
if not usable(KEYS[1], 'zset') then
  return redis.error_reply('WRONGTYPE the index ' .. KEYS[1] .. ' is not a sorted set')
end
local now, dry, lapsed = server_time(), ARGV[4] == '1', {}
for _, entry in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, ARGV[3])) do
  local space = string.find(entry, ' ', 1, true)
  local queue, listener = string.sub(entry, 1, (space or 1) - 1), string.sub(entry, (space or 0) + 1)
  local listeners, leases = ARGV[1] .. queue .. ARGV[5], ARGV[2] .. queue .. ARGV[5]
  local expiry, member = false, 0
  if space and usable(leases, 'zset') and usable(listeners, 'set') then
    expiry = redis.call('ZSCORE', leases, listener)
    member = redis.call('SISMEMBER', listeners, listener)
  end
  if not expiry and member == 0 then
    if not dry then
      redis.call('ZREM', KEYS[1], entry)
    end
  elseif expiry and tonumber(expiry) > now then
    if not dry then
      redis.call('ZADD', KEYS[1], expiry, entry)
    end
  else
    table.insert(lapsed, {queue, listener, expiry or ''})
  end
end
return lapsed
