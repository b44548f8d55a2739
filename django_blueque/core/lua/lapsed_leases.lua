-- lapsed_leases: the tasks of the lease index whose lease has lapsed (on Redis's clock), for
-- the reaper to watch; a pass costs what has lapsed, not what runs. Upkeep on the way: an
-- entry whose task is no longer started under a lease of ours (finished, reclaimed by a
-- blueque 1.0 worker, gone) is removed; one whose lease key lives on (renewed by a process
-- that does not keep the index) gets the lease key's expiry.
-- KEYS[1] lease index (a WRONGTYPE error when it is not a sorted set)
-- ARGV[1] task key prefix, ARGV[2] lease key prefix, ARGV[3] most entries, ARGV[4] '1' for a
-- dry run (nothing written)
-- Returns {{id, queue, node, pid, token}, ...}.
--#include common.lib
if not usable(KEYS[1], 'zset') then
  return redis.error_reply('WRONGTYPE the index ' .. KEYS[1] .. ' is not a sorted set')
end
local now, dry, lapsed = server_time(), ARGV[4] == '1', {}
local ids, touched = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, ARGV[3]), {}
for _, id in ipairs(ids) do
  touched[#touched + 1] = ARGV[1] .. id
  touched[#touched + 1] = ARGV[2] .. id
end
here(touched)
for _, id in ipairs(ids) do
  local state = false
  if redis.call('TYPE', ARGV[1] .. id).ok == 'hash' then
    state = redis.call('HMGET', ARGV[1] .. id, 'status', 'lease', 'node', 'pid', 'queue',
                       'reclaimed_node')
  end
  local ttl = redis.call('PTTL', ARGV[2] .. id)
  if not state or state[1] ~= 'started' or not state[2] or state[2] == '' or state[6] then
    if not dry then
      redis.call('ZREM', KEYS[1], id)
    end
  elseif ttl > 0 then
    if not dry then
      redis.call('ZADD', KEYS[1], now + ttl / 1000, id)
    end
  else
    table.insert(lapsed, {id, state[5] or '', state[3] or '', state[4] or '', state[2]})
  end
end
return lapsed
