"""blueque 1.0.1 from PyPI, the system our engine stays wire-compatible with (no batch enqueue)."""

from importlib.metadata import version

import common
from blueque import Client
from blueque.forking_runner import ForkingRunner


def _callback(task):
    return common.task_body(task.parameters)


class Driver:
    """blueque 1.0.1: Client, Queue.enqueue and the one-task-at-a-time ForkingRunner."""

    has_batch = False
    version = version("blueque")

    def __init__(self, url):
        self.client = Client(url)
        self.queue = self.client.get_queue(common.QUEUE)

    def enqueue(self, params):
        return self.queue.enqueue(params)

    def end_key(self, task_id):
        return f"blueque_task_{task_id}"

    def ended(self, redis, task_id):
        return redis.hget(self.end_key(task_id), "status") == b"complete"

    def listen(self):
        ForkingRunner(self.client, common.QUEUE, _callback).run()


if __name__ == "__main__":
    common.main(Driver)
