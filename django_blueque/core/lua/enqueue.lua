-- enqueue: tasks as blueque 1.0's transaction writes them (HSET task; ZINCRBY queues 0 Q;
-- LPUSH pending id, per task), any number in one script call: one command to send and one
-- reply to read, however many tasks (a MULTI would carry three commands per task).
-- A task with a priority goes to the prioritized set instead (see make_pending).
-- KEYS[1] queues zset, KEYS[2..5] the queue's waiting keys (Keys.waiting)
-- ARGV[1] queue, ARGV[2] task key prefix, ARGV[3] status, ARGV[4] now, ARGV[5] number of
-- extension field pairs n, then the n pairs, then (task id, parameters) per task
--#include common.lib
if not (usable(KEYS[1], 'zset') and usable(KEYS[2], 'list')) then
  return redis.error_reply('cannot enqueue to ' .. ARGV[1] .. ': its pending list or the queues set holds the wrong type')
end
local queue, prefix, status, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local extras = tonumber(ARGV[5])
local first = 6 + 2 * extras
local waiting, priority = {KEYS[2], KEYS[3], KEYS[4], KEYS[5]}, nil
for j = 6, first - 1, 2 do
  if ARGV[j] == 'priority' then
    priority = ARGV[j + 1]
  end
end
for i = first, #ARGV, 2 do
  local id = ARGV[i]
  local fields = {'status', status, 'queue', queue, 'parameters', ARGV[i + 1],
                  'created', now, 'updated', now}
  for j = 6, first - 1 do
    fields[#fields + 1] = ARGV[j]
  end
  redis.call('HSET', prefix .. id, unpack(fields))
  make_pending(waiting, id, priority, false)
end
redis.call('ZINCRBY', KEYS[1], 0, queue)
return 1
