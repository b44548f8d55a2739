-- cancel: stop a task wherever it is. A scheduled task, or a pending one within a window of
-- either end of its list, fails at once with the error 'cancelled'. A reserved or started one
-- is flagged, and its listener is told (through its cancels set) to stop the process; the
-- listener then records the failure. A pending task deeper in a long list is flagged too, and
-- fails without running when a listener takes it (start.lua): taking it out of the middle of
-- the list would scan the list (LREM), stalling Redis for every client.
-- A pending task with a priority is taken out of the prioritized set (no scan: it is sorted).
-- KEYS[1] task, KEYS[2] pending list, KEYS[3] scheduled set, KEYS[4] failed list,
-- KEYS[5] prioritized set, KEYS[6] unique hash (a cancelled unique task frees its key),
-- KEYS[7] and ARGV[5] the queue's failed-by-type index (error types set, per-type key prefix)
-- ARGV[1] id, ARGV[2] now, ARGV[3] cancels-set key prefix (the node is read from the task),
-- ARGV[4] window: how far from either end of the pending list the id is looked for
-- KEYS[8] held set (Keys.held): a task set aside while its concurrency key was full
-- ARGV[6] Keys.dependency_templates: a task waiting for its dependencies is cancelled at once
-- too, and the tasks waiting for a cancelled one are cancelled behind it (depends.lib)
-- Returns 'cancelled' ('cancelled settling' when dependents are left to settle.lua),
-- 'requested', the status of a finished task, or false if there is none.
--#include common.lib
--#include admin.lib
--#include depends.lib
--#include admission.lib
here({ARGV[5] .. CANCELLED})
expect(KEYS[1], 'hash')
local status = redis.call('HGET', KEYS[1], 'status')
if not status then
  return false
end
local now = ARGV[2]
if status == 'reserved' or status == 'started' then
  local node = redis.call('HGET', KEYS[1], 'node')
  if node then
    expect(ARGV[3] .. node, 'set')
    redis.call('SADD', ARGV[3] .. node, ARGV[1])
  end
  redis.call('HSET', KEYS[1], 'cancel_requested', now)
  return 'requested'
end
local K = dependency_keys(ARGV[6])
if status == 'waiting' then
  expect(K.waiting_tasks(redis.call('HGET', KEYS[1], 'queue') or ''), 'zset')
  expect(KEYS[4], 'list')
  cancel_waiting(K, KEYS[1], ARGV[1], now, '', 'cancelled')
  redis.call('HDEL', KEYS[1], 'blocked_by')
  return settle_dependents(K, ARGV[1], false, now) and 'cancelled settling' or 'cancelled'
end
if status ~= 'pending' and status ~= 'scheduled' then
  return status
end
expect(KEYS[2], 'list')
expect(KEYS[3], 'zset')
expect(KEYS[4], 'list')
if status == 'scheduled' then
  redis.call('ZREM', KEYS[3], ARGV[1])
elseif usable(KEYS[5], 'zset') and redis.call('ZREM', KEYS[5], ARGV[1]) == 1 then
  -- it was waiting with a priority
elseif forget_held(KEYS[8], KEYS[1], ARGV[1]) then
  -- it waited for a run of its concurrency key to end
elseif unlist(KEYS[2], ARGV[1], tonumber(ARGV[4])) == 'deep' then
  redis.call('HSET', KEYS[1], 'cancel_requested', now)
  return 'requested'
end
fail_cancelled(KEYS[1], ARGV[1], now, {KEYS[4], KEYS[6], KEYS[7]}, ARGV[5])
return settle_dependents(K, ARGV[1], false, now) and 'cancelled settling' or 'cancelled'
