"""RQ (latest from PyPI): a fork-per-job worker, the best-known Redis task queue for Python.

The job function is common.task_body; the worker finds it because this script's folder is the
first entry of sys.path in the worker and in every work-horse it forks.
"""

import common
import rq
from redis import Redis
from rq import Queue, Worker


class Driver:
    """RQ: Queue.enqueue, Queue.enqueue_many on a pipeline, and Worker.work() (one work-horse)."""

    has_batch = True
    version = rq.__version__

    def __init__(self, url):
        self.redis = Redis.from_url(url)
        self.queue = Queue(common.QUEUE, connection=self.redis)

    def enqueue(self, params):
        return self.queue.enqueue(common.task_body, params)

    def enqueue_many(self, params):
        with self.redis.pipeline() as pipe:
            jobs = self.queue.enqueue_many(
                [Queue.prepare_data(common.task_body, (p,)) for p in params], pipeline=pipe)
            pipe.execute()
        return jobs

    def end_key(self, job):
        return job.key.decode() if isinstance(job.key, bytes) else job.key  # bytes before RQ 2

    def ended(self, redis, job):
        return redis.hget(job.key, "status") == b"finished"

    def listen(self):
        # WARNING keeps RQ from logging two lines per job; the other systems log nothing either.
        Worker([self.queue], connection=self.redis).work(logging_level="WARNING")


if __name__ == "__main__":
    common.main(Driver)
