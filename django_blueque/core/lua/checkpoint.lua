-- checkpoint: the running task stores the state a later run resumes from, if it still holds
-- its lease (a stale run cannot overwrite a newer one's). The state is JSON the client checked.
-- KEYS[1] task; ARGV[1] token, ARGV[2] state (JSON), ARGV[3] now
--#include common.lib
if status_of(KEYS[1]) ~= 'started' or redis.call('HGET', KEYS[1], 'lease') ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'checkpoint', ARGV[2], 'checkpoint_at', ARGV[3], 'updated', ARGV[3])
return 1
