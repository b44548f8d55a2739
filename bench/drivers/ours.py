"""django_blueque's engine, run from this checkout with the interpreter that runs the benchmark."""

import os
import sys
from pathlib import Path

# BENCH_ENGINE: another checkout's engine, measured by this harness (run.py --engine)
sys.path.insert(0, os.environ.get("BENCH_ENGINE") or str(Path(__file__).resolve().parents[2]))

import common  # noqa: E402

import django_blueque  # noqa: E402
from django_blueque.core import Client, ForkingRunner  # noqa: E402


def _callback(task):
    return common.task_body(task.parameters)


class Driver:
    """django_blueque.core: the blueque 1.0 API plus enqueue_many, listener at any concurrency."""

    has_batch = True
    version = django_blueque.__version__
    source = str(Path(django_blueque.__file__).resolve().parents[1])  # the checkout measured

    def __init__(self, url):
        self.client = Client(url)
        self.queue = self.client.get_queue(common.QUEUE)

    def enqueue(self, params):
        return self.queue.enqueue(params)

    def enqueue_many(self, params):
        return self.queue.enqueue_many(params)

    def end_key(self, task_id):
        return f"blueque_task_{task_id}"

    def ended(self, redis, task_id):
        return redis.hget(self.end_key(task_id), "status") == b"complete"

    def listen(self, concurrency=1):
        ForkingRunner(self.client, common.QUEUE, _callback, concurrency=concurrency).run()


if __name__ == "__main__":
    common.main(Driver)
