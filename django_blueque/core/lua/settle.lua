-- settle: one batch of the dependents of an ended task that the script recording its end left
-- to settle (depends.lib's SETTLE_BATCH): from the cursor the settling hash keeps, as that end
-- would have (its status says which: complete, or failed for good); one that runs again
-- meanwhile (retried) is dropped: its end will settle them.
-- KEYS[1] the settling hash (Keys.settling), ARGV[1] Keys.dependency_templates, ARGV[2] now,
-- ARGV[3] the ended task's id
-- Returns 1 while edges are left, else 0.
--#include common.lib
--#include admin.lib
--#include depends.lib
if not usable(KEYS[1], 'hash') then
  return redis.error_reply('cannot settle dependents: ' .. KEYS[1] .. ' holds the wrong type')
end
local id = ARGV[3]
local cursor = redis.call('HGET', KEYS[1], id)
if not cursor then
  return 0
end
redis.call('HDEL', KEYS[1], id)
local K = dependency_keys(ARGV[1])
local status = status_of(K.task(id))
if status ~= 'complete' and status ~= 'failed' then
  return 0
end
return settle_dependents(K, id, status == 'complete', ARGV[2], cursor) and 1 or 0
