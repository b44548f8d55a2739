-- progress: the running task reports how far it is, if it still holds its lease.
-- KEYS[1] task; ARGV[1] token, ARGV[2] percentage, ARGV[3] message, ARGV[4] now
--#include common.lib
if status_of(KEYS[1]) ~= 'started' or redis.call('HGET', KEYS[1], 'lease') ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'progress', ARGV[2], 'progress_message', ARGV[3], 'updated', ARGV[4])
return 1
