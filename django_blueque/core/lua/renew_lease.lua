-- renew_lease: the running task's process extends its lease, if it still holds it.
-- KEYS[1] lease key, KEYS[2] task
-- ARGV[1] token, ARGV[2] lease ttl (ms)
-- Returns {1, cancel_requested or false} while the lease is held, {0} once it is lost.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {0}
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, redis.call('HGET', KEYS[2], 'cancel_requested')}
