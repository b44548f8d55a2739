-- heartbeat: a listener says it is alive by extending its lease on each of its queues, to
-- Redis's time + ttl. It is (re-)registered as blueque 1.0 registers (SADD listeners,
-- ZINCRBY queues +1) whenever it is missing from a listeners set: after its first beat, a
-- Redis restart, or someone else's release (the reaper's, or blueque 1.0's claim_orphan).
-- The info hash is written when the caller sends it; the cancels set is read while the
-- listener runs tasks.
-- KEYS[1] queues zset, KEYS[2] listener info hash, KEYS[3] cancels set, KEYS[4] listener index,
-- then per queue: listeners set, listener leases zset
-- ARGV[1] listener id, ARGV[2] heartbeat ttl (s), ARGV[3] '1' to collect cancels, then the
-- queue names, then the info hash's fields and values, if any
-- Returns {1 if it (re-)registered, else 0, {task ids to cancel}, {queues skipped: wrong type}}.
--#include common.lib
local listener = ARGV[1]
local expiry = server_time() + tonumber(ARGV[2])
local nqueues = (#KEYS - 4) / 2
local indexed = usable(KEYS[4], 'zset')
local registered, skipped = 0, {}
for i = 1, nqueues do
  local listeners, leases, queue = KEYS[3 + 2 * i], KEYS[4 + 2 * i], ARGV[3 + i]
  if usable(listeners, 'set') and usable(leases, 'zset') then
    redis.call('ZADD', leases, expiry, listener)
    if indexed then
      redis.call('ZADD', KEYS[4], expiry, queue .. ' ' .. listener)
    end
    if redis.call('SADD', listeners, listener) == 1 then
      registered = 1
      if usable(KEYS[1], 'zset') then
        redis.call('ZINCRBY', KEYS[1], 1, queue)
      end
    end
  else
    table.insert(skipped, queue)
  end
end
if #ARGV > 3 + nqueues and usable(KEYS[2], 'hash') then
  redis.call('HSET', KEYS[2], unpack(ARGV, 4 + nqueues))
end
local cancels = {}
if ARGV[3] == '1' and usable(KEYS[3], 'set') then
  cancels = redis.call('SMEMBERS', KEYS[3])
  if #cancels > 0 then
    redis.call('DEL', KEYS[3])
  end
end
return {registered, cancels, skipped}
