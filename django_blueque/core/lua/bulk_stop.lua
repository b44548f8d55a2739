-- bulk_stop: stop a running bulk job between two batches; what it did stays done.
-- KEYS[1] job hash, KEYS[2] set of running jobs
-- ARGV[1] now, ARGV[2] seconds to keep the job's record, ARGV[3] the job's id
-- Returns 1, or 0 when the job was not running.
--#include common.lib
--#include admin.lib
expect(KEYS[1], 'hash')
expect(KEYS[2], 'set')
if redis.call('HGET', KEYS[1], 'status') ~= 'running' then
  return 0
end
redis.call('SREM', KEYS[2], ARGV[3])
redis.call('HSET', KEYS[1], 'status', 'stopped', 'updated', ARGV[1], 'finished', ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[2])
return 1
