-- bulk_start: begin a bulk action on every task of one list (retry all failed, delete all
-- complete or all failed, cancel all pending), unless the same job is already running. The job records the
-- list's length and its newest id (the head): bulk_step works from the tail, the oldest end,
-- and stops at that id, so tasks that arrive meanwhile (pushed at the head) are never touched.
-- KEYS[1] job hash, KEYS[2] the list, KEYS[3] set of running jobs, KEYS[4] the prioritized
-- set (a cancel walks it too: its tasks count in the total), KEYS[5] the held set (Keys.held:
-- a cancel first puts the tasks held for their concurrency key back at the list's oldest end)
-- ARGV[1] action ('retry', 'delete' or 'cancel'), ARGV[2] queue, ARGV[3] state,
-- ARGV[4] who asked, ARGV[5] now, ARGV[6] seconds to keep the job's record once it ended,
-- ARGV[7] the job's id, ARGV[8] '1' to retry cancelled tasks too (else bulk_step leaves them)
-- Returns 1 when a job was started, 0 when the same job was already running.
--#include common.lib
--#include admin.lib
expect(KEYS[1], 'hash')
expect(KEYS[2], 'list')
expect(KEYS[3], 'set')
if redis.call('HGET', KEYS[1], 'status') == 'running' then
  return 0
end
redis.call('DEL', KEYS[1])
if ARGV[1] == 'cancel' and usable(KEYS[5], 'zset') then
  for _, member in ipairs(redis.call('ZRANGE', KEYS[5], 0, -1)) do
    redis.call('RPUSH', KEYS[2], string.match(member, ' (%S+)$'))
  end
  redis.call('DEL', KEYS[5])
end
local total = redis.call('LLEN', KEYS[2])
if ARGV[1] == 'cancel' and usable(KEYS[4], 'zset') then
  total = total + redis.call('ZCARD', KEYS[4])
end
local marker = redis.call('LINDEX', KEYS[2], 0) or ''
redis.call('HSET', KEYS[1], 'action', ARGV[1], 'queue', ARGV[2], 'state', ARGV[3],
           'user', ARGV[4], 'total', total, 'processed', 0, 'affected', 0, 'marker', marker,
           'started', ARGV[5], 'updated', ARGV[5], 'status', 'running',
           'cancelled', ARGV[8] or '0')
if total == 0 then
  redis.call('HSET', KEYS[1], 'status', 'done', 'finished', ARGV[5])
  redis.call('EXPIRE', KEYS[1], ARGV[6])
else
  redis.call('SADD', KEYS[3], ARGV[7])
end
return 1
