-- enqueue: one task, as blueque 1.0's transaction writes it (HSET task; ZINCRBY queues 0 Q;
-- LPUSH pending id), in one script call: the same effect and atomicity, with one command to
-- send and one reply to read instead of five (batches still go as one MULTI transaction).
-- KEYS[1] task, KEYS[2] queues zset, KEYS[3] pending list
-- ARGV[1] queue, ARGV[2] task id, then the task hash's fields and values
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
redis.call('ZINCRBY', KEYS[2], 0, ARGV[1])
redis.call('LPUSH', KEYS[3], ARGV[2])
return 1
