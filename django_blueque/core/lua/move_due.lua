-- move_due: move a queue's due scheduled tasks to its pending list, in one step, so that any
-- number of schedulers can run at once with no task moved twice and none lost. Due means
-- eta <= Redis's clock (one clock for every scheduler, whatever their hosts' clocks say), or
-- with ARGV[4] '1', eta <= ARGV[1], the caller's clock, as blueque 1.0's enqueue_due_tasks().
-- A retry goes first of its priority (see make_pending), a task scheduled by its producer last.
-- The queue's entry in the due index is then set to its next eta (removed when none is left).
-- KEYS[1] scheduled set, KEYS[2] pending list, KEYS[3] due index, KEYS[4..6] the rest of the
-- queue's waiting keys (Keys.waiting: a task with a priority goes to the prioritized set)
-- ARGV[1] now (written as 'updated'), ARGV[2] task key prefix, ARGV[3] most tasks to move,
-- ARGV[4] '1' to judge due by ARGV[1], ARGV[5] queue
--#include common.lib
if not (usable(KEYS[1], 'zset') and usable(KEYS[2], 'list')) then
  return redis.error_reply('cannot move due tasks: a key of the queue holds the wrong type')
end
local due = ARGV[4] == '1' and ARGV[1] or server_time()
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', due, 'LIMIT', 0, ARGV[3])
local tasks = {}
for i, id in ipairs(ids) do
  tasks[i] = ARGV[2] .. id
end
here(tasks)
local moved = {}
for _, id in ipairs(ids) do
  redis.call('ZREM', KEYS[1], id)
  local task = ARGV[2] .. id
  local status = status_of(task)
  if status == 'scheduled' then
    -- a retry (a task that ran: attempts) goes first, as one without backoff does; a task its
    -- producer scheduled joins the line
    local fields = redis.call('HMGET', task, 'priority', 'attempts')
    make_pending({KEYS[2], KEYS[4], KEYS[5], KEYS[6]}, id, fields[1],
                 (tonumber(fields[2]) or 0) > 0)
    redis.call('HSET', task, 'status', 'pending', 'updated', ARGV[1])
    table.insert(moved, id)
  elseif (not status or status == 'pending')
      and redis.call('HEXISTS', task, 'unwritten_since') == 1 then
    -- an id that waits for its hash (reserve.lib's wait_for_hash): back first in its queue,
    -- where the next take looks at it again
    make_pending({KEYS[2], KEYS[4], KEYS[5], KEYS[6]}, id, redis.call('HGET', task, 'priority'),
                 true)
    table.insert(moved, id)
  end
end
if #ids < tonumber(ARGV[3]) and usable(KEYS[3], 'zset') then
  local next_eta = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if next_eta[2] then
    redis.call('ZADD', KEYS[3], next_eta[2], ARGV[5])
  else
    redis.call('ZREM', KEYS[3], ARGV[5])
  end
end
return moved
