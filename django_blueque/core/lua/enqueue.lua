-- enqueue: tasks as blueque 1.0's transactions write them (enqueue: HSET task; ZINCRBY queues
-- 0 Q; LPUSH pending id; schedule: HSET task ... eta E; ZINCRBY queues 0 Q; ZADD scheduled E
-- id), any number in one script call: one command to send and one reply to read, however
-- many tasks (a MULTI would carry three commands per task).
-- A task with a priority goes to the prioritized set instead (see make_pending).
-- A task with a unique_key (one task per call) is written only if no task of the queue holds
-- that key: one scheduled, pending or reserved, or started with unique_until 'end'. Else
-- nothing is written and the holder's id is returned; a higher priority raises the holder's
-- (seed 002's rule; a holder deep in a long pending list keeps its place, see unlist).
-- KEYS[1] queues zset, KEYS[2..5] the queue's waiting keys (Keys.waiting), KEYS[6] scheduled
-- set, KEYS[7] due index, KEYS[8] unique hash; KEYS[3..8] may be left out when there are no
-- extension fields (only a priority, an eta or a unique key reads them)
-- A task with a depends_on field (a JSON list of ids; one task per call) waits for them
-- (depends.lib): each must exist (else nothing is written); those already complete count at
-- once, one that failed for good cancels it at once (unless allow_failure is '1'), and with
-- none left to wait for it is written as without them.
-- ARGV[1] queue, ARGV[2] task key prefix, ARGV[3] status ('pending', or 'scheduled' with an
-- 'eta' field), ARGV[4] now, ARGV[5] window (see unlist), ARGV[6] Keys.dependency_templates
-- (or '' without depends_on), ARGV[7] number of extension field pairs n, then the n pairs,
-- then (task id, parameters) per task
-- Returns '' (written), the holder's id (nothing written), or nil (written, but the due index
-- holds the wrong type: the sweep indexes the task). One value: an array costs the client more
-- to read.
--#include common.lib
--#include admin.lib
--#include depends.lib
local queue, prefix, status, now, window = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local first = 8 + 2 * tonumber(ARGV[7])
local waiting = {KEYS[2], KEYS[3], KEYS[4], KEYS[5]}
local extra = {}
for j = 8, first - 1, 2 do
  extra[ARGV[j]] = ARGV[j + 1]
end
local unique = extra['unique_key']
local eta = status == 'scheduled' and tonumber(extra['eta'])
if not (usable(KEYS[1], 'zset') and usable(KEYS[2], 'list') and (not eta or usable(KEYS[6], 'zset'))
        and (not unique or usable(KEYS[8], 'hash'))) then
  return redis.error_reply('cannot enqueue to ' .. queue .. ': a key of its queue or the queues set holds the wrong type')
end

-- The task holding `key`, and its status, or nil.
local function holder_of(key)
  local id = redis.call('HGET', KEYS[8], key)
  if not id then
    return nil
  end
  local task = prefix .. id
  local held = status_of(task)
  if held == 'started' and redis.call('HGET', task, 'unique_until') ~= 'end' then
    return nil
  end
  if (held == 'waiting' or held == 'scheduled' or held == 'pending' or held == 'reserved' or held == 'started')
      and redis.call('HGET', task, 'unique_key') == key then
    return id, held
  end
  return nil
end

local function raise_priority(id, held, wanted)
  local task = prefix .. id
  wanted = tonumber(wanted)
  if not wanted or wanted <= number(redis.call('HGET', task, 'priority'), 0) then
    return
  end
  if held == 'pending' then
    local moved = usable(waiting[2], 'zset') and redis.call('ZREM', waiting[2], id) == 1
    if not moved and unlist(waiting[1], id, window) ~= 'removed' then
      return
    end
    make_pending(waiting, id, wanted, false)
  elseif held ~= 'scheduled' then
    return  -- reserved or running: too late to matter
  end
  redis.call('HSET', task, 'priority', wanted)
end

if unique then
  local id, held = holder_of(unique)
  if id then
    raise_priority(id, held, extra['priority'])
    return id
  end
end
local tasks = {}
if extra['depends_on'] then
  local K = dependency_keys(ARGV[6])
  local ids = dependency_ids(extra['depends_on'])
  if not ids or #ARGV ~= first + 1 then
    return redis.error_reply('cannot enqueue to ' .. queue .. ': depends_on must be a JSON list of task ids, for one task')
  end
  local left = {}
  for _, dependency in ipairs(ids) do
    local held = status_of(K.task(dependency))
    if not held then
      return redis.error_reply('cannot enqueue to ' .. queue .. ': unknown dependency ' .. dependency .. ' (no such task)')
    end
    if not usable(K.dependents(dependency), 'set') then
      return redis.error_reply('cannot enqueue to ' .. queue .. ': ' .. K.dependents(dependency) .. ' holds the wrong type')
    end
    if held ~= 'complete' and not (held == 'failed' and extra['allow_failure'] == '1') then
      left[#left + 1] = dependency
    end
  end
  if not usable(K.waiting_tasks(queue), 'zset') then
    return redis.error_reply('cannot enqueue to ' .. queue .. ': ' .. K.waiting_tasks(queue) .. ' holds the wrong type')
  end
  if #left > 0 then
    local id, task = ARGV[first], prefix .. ARGV[first]
    local fields = {'status', 'waiting', 'queue', queue, 'parameters', ARGV[first + 1],
                    'created', now, 'updated', now, 'waiting_for', #left}
    for j = 8, first - 1 do
      fields[#fields + 1] = ARGV[j]
    end
    redis.call('HSET', task, unpack(fields))
    redis.call('ZADD', K.waiting_tasks(queue), tonumber(now), id)
    for _, dependency in ipairs(left) do
      redis.call('SADD', K.dependents(dependency), id)
    end
    if unique then
      redis.call('HSET', KEYS[8], unique, id)
    end
    redis.call('ZINCRBY', KEYS[1], 0, queue)
    local failed = failed_dependency(K, left, extra['allow_failure'])
    if failed then
      cancel_waiting(K, task, id, now, failed, 'cancelled: its dependency ' .. failed .. ' failed')
      settle_dependents(K, id, false, now)
    end
    return ''
  end
end
for i = first, #ARGV, 2 do
  tasks[#tasks + 1] = prefix .. ARGV[i]
end
here(tasks)
-- Without an eta or a priority, the ids go to the pending list in one LPUSH (the order one
-- LPUSH each would leave): a call to Redis from a script costs more than the push itself.
local plain = not eta and not extra['priority']
local pushed = {}
for i = first, #ARGV, 2 do
  local id = ARGV[i]
  local fields = {'status', status, 'queue', queue, 'parameters', ARGV[i + 1],
                  'created', now, 'updated', now}
  for j = 8, first - 1 do
    fields[#fields + 1] = ARGV[j]
  end
  redis.call('HSET', prefix .. id, unpack(fields))
  if eta then
    redis.call('ZADD', KEYS[6], eta, id)
  elseif plain then
    pushed[#pushed + 1] = id
  else
    make_pending(waiting, id, extra['priority'], false)
  end
  if unique then
    redis.call('HSET', KEYS[8], unique, id)
  end
end
if #pushed > 0 then
  redis.call('LPUSH', KEYS[2], unpack(pushed))
end
redis.call('ZINCRBY', KEYS[1], 0, queue)
if eta then
  if not usable(KEYS[7], 'zset') then
    return false
  end
  redis.call('ZADD', KEYS[7], 'LT', eta, queue)
end
return ''
