"""What a task's code can reach while it runs, without anything passed through its arguments."""

import threading

_current = None  # a process runs one task at a time: the forked child sets it once


class StopRequested(BaseException):
    """Raised in a task's process when its listener stops it (cancellation, timeout).

    A BaseException, like KeyboardInterrupt, so a task's ``except Exception`` does not swallow
    it; ``finally`` blocks and context managers still run.
    """


class RunningTask:
    """The task being run by this process: its id, attempt and a way to report progress."""

    def __init__(self, protocol, task, token):
        self._protocol = protocol
        self.task = task
        self.id = task.id
        self.queue = task.queue
        self.token = token
        self.attempt = task.attempts or 1  # counted when the run started
        self.cancel_requested = threading.Event()
        self.lease_lost = threading.Event()

    def report_progress(self, percent, message=""):
        """Record how far the task is (0..100) and a message anyone can read."""
        percent = float(percent)
        if not 0 <= percent <= 100:
            raise ValueError(f"progress must be between 0 and 100, not {percent}")
        if not isinstance(message, str):
            raise TypeError(f"progress message must be a string, not {type(message).__name__}")
        return self._protocol.report_progress(self.id, self.token, percent, message)

    def should_stop(self):
        """True once someone asked to cancel this task: a long task can end cleanly."""
        return self.cancel_requested.is_set() or self.lease_lost.is_set()


def current_task():
    """The RunningTask of this process, or None outside a task."""
    return _current


def set_current_task(running):
    global _current
    _current = running
