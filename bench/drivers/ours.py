"""django_blueque's engine, run from this checkout with the interpreter that runs the benchmark."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import common  # noqa: E402

import django_blueque  # noqa: E402
from django_blueque.core import Client, ForkingRunner  # noqa: E402


def _callback(task):
    return common.task_body(task.parameters)


class Driver:
    """django_blueque.core: the blueque 1.0 API plus enqueue_many, listener at any concurrency."""

    has_batch = True
    version = django_blueque.__version__

    def __init__(self, url):
        self.client = Client(url)
        self.queue = self.client.get_queue(common.QUEUE)

    def enqueue(self, params):
        return self.queue.enqueue(params)

    def enqueue_many(self, params):
        return self.queue.enqueue_many(params)

    def listen(self, concurrency=1):
        ForkingRunner(self.client, common.QUEUE, _callback, concurrency=concurrency).run()


if __name__ == "__main__":
    common.main(Driver)
