-- expire_finished: delete the oldest finished tasks of one list whose retention has passed.
-- The list is newest-first, so the tail is the oldest; stop at the first task still kept.
-- A task without an 'expires' field (finished by blueque 1.0, or cancelled before it ran) is
-- kept for its own retention, else the default, after its last update; forever when it has
-- neither (or its 'updated' does not parse).
-- KEYS[1] complete or failed list
-- ARGV[1] task key prefix, ARGV[2] now, ARGV[3] default retention (s) or '', ARGV[4] most to delete,
-- ARGV[5] '1' to count what would be deleted and change nothing (the reaper's dry run)
local now, deleted, dry = tonumber(ARGV[2]), 0, ARGV[5] == '1'
while deleted < tonumber(ARGV[4]) do
  local id = redis.call('LINDEX', KEYS[1], dry and -(deleted + 1) or -1)
  if not id then
    break
  end
  local task = ARGV[1] .. id
  local fields = redis.call('HMGET', task, 'expires', 'updated', 'retention')
  local expires = tonumber(fields[1])
  if not fields[2] and not expires then
    expires = 0
  elseif not expires then
    local updated, retention = tonumber(fields[2]), tonumber(fields[3]) or tonumber(ARGV[3])
    if updated and retention then
      expires = updated + retention
    end
  end
  if not expires or expires > now then
    break
  end
  if not dry then
    redis.call('RPOP', KEYS[1])
    redis.call('DEL', task)
  end
  deleted = deleted + 1
end
return deleted
