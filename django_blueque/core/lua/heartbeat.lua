-- heartbeat: a listener says it is alive, (re-)registering on each of its queues as blueque
-- 1.0 does (SADD listeners, ZINCRBY queues +1, counted once), and collects the cancellations
-- it must carry out. Registration, renewal and re-registration after a Redis restart are
-- the same step.
-- KEYS[1] queues zset, KEYS[2] listener info hash, KEYS[3] cancels set,
-- then per queue: listeners set, listener leases zset
-- ARGV[1] listener id, ARGV[2] now, ARGV[3] heartbeat ttl (s), then the queue names,
-- then the info hash's fields and values (as many as there are after the queue names)
local listener, now = ARGV[1], tonumber(ARGV[2])
local nqueues = (#KEYS - 3) / 2
for i = 1, nqueues do
  local queue = ARGV[3 + i]
  if redis.call('SADD', KEYS[2 + 2 * i], listener) == 1 then
    redis.call('ZINCRBY', KEYS[1], 1, queue)
  end
  redis.call('ZADD', KEYS[3 + 2 * i], now + tonumber(ARGV[3]), listener)
end
redis.call('HSET', KEYS[2], 'beat', ARGV[2])
for i = 4 + nqueues, #ARGV, 2 do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
end
local cancels = redis.call('SMEMBERS', KEYS[3])
if #cancels > 0 then
  redis.call('DEL', KEYS[3])
end
return cancels
