-- expire_finished: delete the finished tasks of a list whose retention has passed (on Redis's
-- clock) among its `window` oldest (the tail). Every expired task of that window goes, not only
-- those before the first one to keep; the kept ones stay at the tail in their order. A task
-- deeper than the window waits until it is among the window oldest (the README's bound).
-- The list's entry in the expiring index is then set to the earliest expiry left in the
-- window, to now when a full window was deleted (more may wait behind it), or removed.
-- KEYS[1] complete or failed list, KEYS[2] expiring index, KEYS[3] and ARGV[6] the queue's
-- failed-by-type index (error types set, per-type key prefix; ARGV[6] '' for the complete list)
-- ARGV[1] task key prefix, ARGV[2] index member ('<status> <queue>'), ARGV[3] default
-- retention (s) or '', ARGV[4] window, ARGV[5] '1' for a dry run (count only), ARGV[7] the
-- dependents key prefix (a deleted task's dependents set goes with it)
-- Returns {the number of tasks deleted (or, dry, that would be), {the workflow ids named by
-- the tasks deleted}}: the caller deletes the records of those whose tasks are all gone.
--#include common.lib
if not usable(KEYS[1], 'list') then
  return {0, {}}
end
local now, dry, window = server_time(), ARGV[5] == '1', tonumber(ARGV[4])
local ids = redis.call('LRANGE', KEYS[1], -window, -1)
-- read every task first, and touch what the writes will reach (see here)
local expiry, types, workflows, reach = {}, {}, {}, {}
for i, id in ipairs(ids) do
  local task = ARGV[1] .. id
  reach[#reach + 1] = task
  expiry[i] = 0  -- a missing task (or garbage in its place) goes at once
  if redis.call('TYPE', task).ok == 'hash' then
    local fields = redis.call('HMGET', task, 'expires', 'updated', 'retention', 'error_type',
                              'workflow')
    types[i], workflows[i] = fields[4], fields[5]
    expiry[i] = number(fields[1], nil)
    if not expiry[i] then
      local updated, retention = number(fields[2], nil), number(fields[3], number(ARGV[3], nil))
      if updated and retention then
        expiry[i] = updated + retention
      end
    end
    if ARGV[6] ~= '' and types[i] then
      reach[#reach + 1] = ARGV[6] .. types[i]
    end
  end
end
here(reach)
local kept, deleted, earliest, named, ended = {}, 0, false, {}, {}
for i, id in ipairs(ids) do
  local expires, error_type = expiry[i], types[i]
  if expires and expires <= now then
    deleted = deleted + 1
    if not dry then
      if ARGV[6] ~= '' and error_type then
        unindex_failure(KEYS[3], ARGV[6], error_type, id)
      end
      redis.call('DEL', ARGV[1] .. id, ARGV[7] .. id)
      local workflow = workflows[i]
      if workflow and workflow ~= '' and not named[workflow] then
        named[workflow] = true
        ended[#ended + 1] = workflow
      end
    end
  else
    table.insert(kept, id)
    if expires and (not earliest or expires < earliest) then
      earliest = expires
    end
  end
end
if dry then
  return {deleted, {}}
end
if deleted > 0 then
  redis.call('LTRIM', KEYS[1], 0, -(#ids + 1))
  for start = 1, #kept, 1000 do
    redis.call('RPUSH', KEYS[1], unpack(kept, start, math.min(start + 999, #kept)))
  end
end
if usable(KEYS[2], 'zset') then
  if deleted == window and redis.call('LLEN', KEYS[1]) > 0 then
    redis.call('ZADD', KEYS[2], now, ARGV[2])
  elseif earliest then
    redis.call('ZADD', KEYS[2], earliest, ARGV[2])
  else
    redis.call('ZREM', KEYS[2], ARGV[2])
  end
end
return {deleted, ended}
