"""The floor: the least a queue that forks a process per task can do on this interpreter and
redis-py, and no more. An enqueue is one LPUSH; the listener waits in BRPOP, forks, and waits
for the child; the child runs the task and records its end with one command on a connection of
its own (a forked process cannot share its parent's), then exits. No lease, no status, no
retry, no recovery of anything: it loses a task whenever a process dies. Each of our figures
divided by the floor's is how close the engine comes to what a process per task costs here."""

import os
import signal
import sys
from importlib.metadata import version
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import common  # noqa: E402

from django_blueque.core.connections import url_redis  # noqa: E402

PENDING = "floor:pending"
ENDED = "floor:ended"


class Driver:
    """LPUSH to enqueue (a pipeline for a batch), and a BRPOP-fork-waitpid listener."""

    has_batch = True
    version = f"redis-py {version('redis')}"

    def __init__(self, url):
        # the engine's own connection options, so the floor pays what its connections pay
        self.redis = url_redis(url, socket_timeout=None)

    def enqueue(self, params):
        self.redis.lpush(PENDING, params)
        return params

    def end_key(self, params):
        return ENDED

    def ended(self, redis, params):
        return params.encode() in redis.lrange(ENDED, 0, -1)

    def enqueue_many(self, params):
        return self.redis.lpush(PENDING, *params)

    def listen(self, concurrency=1):
        signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
        running = set()

        def reap(*_):  # on SIGCHLD: no zombie is left while the listener waits in BRPOP
            try:
                while (pid := os.waitpid(-1, os.WNOHANG)[0]) > 0:
                    running.discard(pid)
            except ChildProcessError:
                pass

        signal.signal(signal.SIGCHLD, reap)
        exits = {signal.SIGCHLD}
        signal.pthread_sigmask(signal.SIG_BLOCK, exits)  # held while running changes
        while True:
            while len(running) >= concurrency:
                signal.sigwait(exits)  # an exit since the last reap is pending: no race
                reap()
            signal.pthread_sigmask(signal.SIG_UNBLOCK, exits)  # reaped at once while waiting
            popped = self.redis.brpop([PENDING], timeout=60)
            signal.pthread_sigmask(signal.SIG_BLOCK, exits)
            if popped is None:
                continue
            running.add(self._start(popped[1]))

    def _start(self, params):
        """Fork the task's process (with SIGCHLD held); its pid."""
        pid = os.fork()
        if pid == 0:
            self._run(params)
        return pid

    def _run(self, params):
        code = 0
        try:
            common.task_body(params)
            self.redis.rpush(ENDED, params)  # its end, on the child's own new connection
        except BaseException:
            code = 1
        finally:
            os._exit(code)


if __name__ == "__main__":
    common.main(Driver)
