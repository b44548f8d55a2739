-- heartbeat: a listener says it is alive by extending its lease on each of its queues, to
-- Redis's time + ttl. It is (re-)registered as blueque 1.0 registers (SADD listeners,
-- ZINCRBY queues +1) whenever it is missing from a listeners set: after its first beat, a
-- Redis restart, or someone else's release (the reaper's, or blueque 1.0's claim_orphan).
-- The info hash is written when the caller sends it; the cancels set is read while the
-- listener runs tasks.
-- KEYS[1] queues zset, KEYS[2] cancels set, KEYS[3] listener index, then per queue: listeners
-- set, listener leases zset; last, the listener info hash when fields are given
-- ARGV[1] listener id, ARGV[2] heartbeat ttl (s), ARGV[3] '1' to collect cancels, ARGV[4] the
-- number of queues, then the queue names, then the info hash's fields and values, if any
-- Returns {1 if it (re-)registered, else 0, {task ids to cancel}, {queues skipped: wrong type}}.
--#include common.lib
local listener = ARGV[1]
local expiry = server_time() + tonumber(ARGV[2])
local nqueues = tonumber(ARGV[4])
local indexed = usable(KEYS[3], 'zset')
local registered, skipped = 0, {}
for i = 1, nqueues do
  local listeners, leases, queue = KEYS[2 + 2 * i], KEYS[3 + 2 * i], ARGV[4 + i]
  if usable(listeners, 'set') and usable(leases, 'zset') then
    redis.call('ZADD', leases, expiry, listener)
    if indexed then
      redis.call('ZADD', KEYS[3], expiry, queue .. ' ' .. listener)
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
local info = KEYS[4 + 2 * nqueues]
if info and usable(info, 'hash') then
  redis.call('HSET', info, unpack(ARGV, 5 + nqueues))
end
local cancels = {}
if ARGV[3] == '1' and usable(KEYS[2], 'set') then
  cancels = redis.call('SMEMBERS', KEYS[2])
  if #cancels > 0 then
    redis.call('DEL', KEYS[2])
  end
end
return {registered, cancels, skipped}
