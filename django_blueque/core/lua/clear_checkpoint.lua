-- clear_checkpoint: an operator's "start over": the task's next run begins from nothing.
-- Refused (0) while a run holds the task (it would write its checkpoint again), or when there
-- is no task hash.
-- KEYS[1] task; ARGV[1] now
--#include common.lib
local status = status_of(KEYS[1])
if not status or status == 'started' or status == 'reserved' then
  return 0
end
redis.call('HDEL', KEYS[1], 'checkpoint', 'checkpoint_at')
redis.call('HSET', KEYS[1], 'updated', ARGV[1])
return 1
