-- stranded: find the ends blueque 1.0 recorded of tasks ours wait for. Its scripts know
-- nothing of dependents, so such an end leaves them waiting. A batch of a queue's waiting
-- tasks is read (ZSCAN from a cursor), and each dependency that ended (complete, or failed)
-- while it still lists the waiting task as a dependent is named in the settling index, from
-- the start, for settle.lua: it settles each edge once (a settled one is gone from the set,
-- or its dependent no longer waits), as our end would have. One named already is left as is.
-- KEYS[1] the queue's waiting_tasks index, ARGV[1] Keys.dependency_templates, ARGV[2] the
-- ZSCAN cursor, ARGV[3] how many waiting tasks to read, ARGV[4] '1' for a dry run (name them,
-- write nothing)
-- Returns {the next cursor ('0': the whole index was read), {the ids of the ends named}}
--#include common.lib
--#include admin.lib
--#include depends.lib
if not usable(KEYS[1], 'zset') then
  return redis.error_reply(KEYS[1] .. ' holds the wrong type: its waiting tasks were not read')
end
local K = dependency_keys(ARGV[1])
local scanned = redis.call('ZSCAN', KEYS[1], ARGV[2], 'COUNT', ARGV[3])
local named, entries = {}, scanned[2]
for i = 1, #entries, 2 do  -- member, score, member, score...
  local id = entries[i]
  local ids = redis.call('TYPE', K.task(id)).ok == 'hash'
              and dependency_ids(redis.call('HGET', K.task(id), 'depends_on')) or {}
  for _, dependency in ipairs(ids) do
    local status = status_of(K.task(dependency))
    local set = K.dependents(dependency)
    if (status == 'complete' or status == 'failed') and usable(set, 'set')
        and redis.call('SISMEMBER', set, id) == 1 then
      local settling = K.settling(redis.call('HGET', K.task(dependency), 'queue') or '')
      local name = false
      if usable(settling, 'hash') then
        if ARGV[4] == '1' then
          name = redis.call('HEXISTS', settling, dependency) == 0
        else
          name = redis.call('HSETNX', settling, dependency, '0') == 1
        end
      end
      if name then named[#named + 1] = dependency end
    end
  end
end
return {scanned[1], named}
