"""The floor with one process forked ahead: the bare fork-per-task loop of floor.py, whose
listener keeps one child forked before any task comes, blocked on a pipe. A task goes down that
pipe and the listener forks the next child while the task runs. This is the least a process
per task costs when nothing is forked on the way to a task: the floor of the pickup (no fork
between the enqueue and the task) and of the idle memory of a listener with a spare (what one
waiting child adds to the bare floor's). It records nothing and recovers nothing, as floor.py."""

import os

import common
from floor import Driver as BareDriver


class Driver(BareDriver):
    """floor.py's loop, the task handed to a child forked ahead down a pipe."""

    def listen(self, concurrency=1):
        self._spare = self._fork_spare()
        super().listen(concurrency)

    def _start(self, params):
        pid, pipe = self._spare
        os.write(pipe, params.encode())
        os.close(pipe)  # the end of the task's parameters
        self._spare = self._fork_spare()
        return pid

    def _fork_spare(self):
        """A child blocked on a pipe until a task's parameters come down it; (pid, write end)."""
        given, give = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(give)
            chunks = []
            while chunk := os.read(given, 65536):
                chunks.append(chunk)
            if not chunks:  # the listener closed the pipe without a task: it is gone
                os._exit(0)
            self._run(b"".join(chunks).decode())
        os.close(given)
        return pid, give


if __name__ == "__main__":
    common.main(Driver)
