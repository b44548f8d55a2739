-- heartbeat: a listener says it is alive by extending its lease on each of its queues.
-- A new lease entry (first beat, or after a Redis restart or a release by the reaper) also
-- (re-)registers it as blueque 1.0 does: SADD listeners, ZINCRBY queues +1 (counted once).
-- In the steady state a beat is one ZADD per queue, plus reading the cancels set while the
-- listener runs tasks, and writing the info hash only when it changed.
-- KEYS[1] queues zset, KEYS[2] listener info hash, KEYS[3] cancels set,
-- then per queue: listeners set, listener leases zset
-- ARGV[1] listener id, ARGV[2] now, ARGV[3] heartbeat ttl (s), ARGV[4] '1' to collect
-- cancels, then the queue names, then the info hash's fields and values, if any
-- Returns {1 if it (re-)registered, else 0, {task ids to cancel}}.
local listener, expiry = ARGV[1], tonumber(ARGV[2]) + tonumber(ARGV[3])
local nqueues = (#KEYS - 3) / 2
local registered = 0
for i = 1, nqueues do
  if redis.call('ZADD', KEYS[3 + 2 * i], expiry, listener) == 1 then
    registered = 1
    if redis.call('SADD', KEYS[2 + 2 * i], listener) == 1 then
      redis.call('ZINCRBY', KEYS[1], 1, ARGV[4 + i])
    end
  end
end
if #ARGV > 4 + nqueues then
  redis.call('HSET', KEYS[2], unpack(ARGV, 5 + nqueues))
end
local cancels = {}
if ARGV[4] == '1' then
  cancels = redis.call('SMEMBERS', KEYS[3])
  if #cancels > 0 then
    redis.call('DEL', KEYS[3])
  end
end
return {registered, cancels}
