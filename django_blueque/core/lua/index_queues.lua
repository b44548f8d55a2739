-- index_queues: the sweep's upkeep of the due and expiring indexes for a window of queues,
-- whatever wrote their tasks (a blueque 1.0 producer keeps no index): each queue with a
-- scheduled task gets its earliest eta in the due index (never later than one already
-- there), each finished list whose oldest task has an expiry (its own, or its last update +
-- the queue's default retention) gets it in the expiring index, unless already entered.
-- KEYS[1] due index, KEYS[2] expiring index, then per queue: scheduled set, complete list,
-- failed list
-- ARGV[1] task key prefix, then per queue: its name, its default retention (s) or ''
-- Returns the number of index entries written.
--#include common.lib
if not (usable(KEYS[1], 'zset') and usable(KEYS[2], 'zset')) then
  return 0
end
local now, written = server_time(), 0
local function oldest_expiry(list, default)
  local id = redis.call('LINDEX', list, -1)
  if not id then
    return nil
  end
  if redis.call('TYPE', ARGV[1] .. id).ok ~= 'hash' then
    return now  -- garbage or a vanished task: expiry drops it at once
  end
  local fields = redis.call('HMGET', ARGV[1] .. id, 'expires', 'updated', 'retention')
  local updated, retention = number(fields[2], nil), number(fields[3], default)
  return number(fields[1], updated and retention and updated + retention or nil)
end
local oldest = {}
for i = 1, (#ARGV - 1) / 2 do
  for _, list in ipairs({KEYS[3 * i + 1], KEYS[3 * i + 2]}) do
    local id = usable(list, 'list') and redis.call('LINDEX', list, -1)
    if id then
      oldest[#oldest + 1] = ARGV[1] .. id
    end
  end
end
here(oldest)
for i = 1, (#ARGV - 1) / 2 do
  local queue, default = ARGV[2 * i], number(ARGV[2 * i + 1], nil)
  local scheduled, complete, failed = KEYS[3 * i], KEYS[3 * i + 1], KEYS[3 * i + 2]
  if usable(scheduled, 'zset') then
    local first = redis.call('ZRANGE', scheduled, 0, 0, 'WITHSCORES')
    if first[2] then
      written = written + redis.call('ZADD', KEYS[1], 'LT', 'CH', first[2], queue)
    end
  end
  for _, list in ipairs({{complete, 'complete'}, {failed, 'failed'}}) do
    local expiry = usable(list[1], 'list') and oldest_expiry(list[1], default)
    if expiry then
      written = written + redis.call('ZADD', KEYS[2], 'NX', expiry, list[2] .. ' ' .. queue)
    end
  end
end
return written
