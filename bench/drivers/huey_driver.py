"""huey (latest from PyPI) with a thread worker: no fork, no process isolation, the task runs in
the consumer's own process.

Named huey_driver.py, not huey.py: this script's folder is the first entry of sys.path, so a
huey.py here would shadow the huey package. The task is registered as `__main__.bench_task` by
the enqueuing role and by the consumer alike, since both run this file as a script.
"""

import logging

import common
import huey
from huey import RedisHuey


def _huey(url):
    # blocking=True (huey's default for Redis, spelled out): the worker waits in BRPOP (1 s
    # timeout, then again) instead of polling RPOP with a back-off sleep, so a task is picked up
    # as soon as it is pushed. results=True is the default: the task's "" result is stored.
    return RedisHuey(common.QUEUE, url=url, blocking=True)


class Driver:
    """huey: task() to enqueue (no batch API: map() and group are one LPUSH per task), and the
    consumer with one thread worker and huey's default scheduler thread."""

    has_batch = False
    version = huey.__version__

    def __init__(self, url):
        self.huey = _huey(url)

        @self.huey.task()
        def bench_task(params):
            return common.task_body(params)

        self.task = bench_task

    def enqueue(self, params):
        return self.task(params)

    def end_key(self, result):
        return self.huey.storage.result_key  # one hash, the task's id its field

    def ended(self, redis, result):
        return redis.hexists(self.end_key(result), result.id)

    def listen(self, concurrency=1):
        # WARNING, as for RQ: the other systems log nothing per task either. One thread worker,
        # like the other systems' listeners at concurrency 1. SIGTERM is huey's immediate stop
        # (graceful_signal='INT'); its threads are daemons, so the process ends at once.
        logging.basicConfig(level=logging.WARNING)
        self.huey.create_consumer(workers=concurrency, worker_type="thread").run()


if __name__ == "__main__":
    common.main(Driver)
