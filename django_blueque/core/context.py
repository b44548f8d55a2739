"""What a task's code can reach while it runs, without anything passed through its arguments."""

import logging
import os
import signal
import threading
import time

import redis

from .protocol import LEASE_TTL

logger = logging.getLogger("django_blueque.task")

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
        self.finished = threading.Event()
        self.timed_out = threading.Event()  # stopped by its own deadline (listener gone)

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

    def keep_lease(self, parent_pid, own_process=True):
        """Renew the lease from a daemon thread until ``finished`` is set."""
        threading.Thread(target=self.renew_lease_until_finished, args=(parent_pid, own_process),
                         name="blueque-lease", daemon=True).start()

    def renew_lease_until_finished(self, parent_pid, own_process):
        """Losing the lease means the task was handed to someone else: stop at once, so it
        never runs twice. A cancellation seen here is flagged for ``should_stop()``; if the
        listener that would stop this process is gone, the process stops itself.
        ``own_process``: the process exists for this task alone (the forking runner's
        children), so it may stop itself; otherwise it only flags ``should_stop()``."""
        while not self.finished.wait(LEASE_TTL / 3):
            try:
                held, cancel = self._protocol.renew_lease(self.id, self.token)
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                logger.warning("task %s: could not renew its lease (%s)", self.id, exc)
                continue
            if not held:
                self.lease_lost.set()
                logger.error("task %s: lease lost (the task was recovered elsewhere)%s",
                             self.id, "; stopping this process" if own_process else "")
                if not own_process:
                    return
                if os.getpgrp() == os.getpid():
                    os.killpg(os.getpid(), signal.SIGKILL)  # its subprocesses too
                os.kill(os.getpid(), signal.SIGKILL)
            if cancel and not self.cancel_requested.is_set():
                self.cancel_requested.set()
                if own_process and os.getppid() != parent_pid:
                    os.kill(os.getpid(), signal.SIGTERM)
            if own_process and os.getppid() != parent_pid:
                self._enforce_timeout_alone()

    def _enforce_timeout_alone(self):
        """With its listener gone, nobody else stops a task past its timeout, and its lease,
        renewed here, would keep it running for ever: SIGTERM itself (recorded as timed out),
        then SIGKILL a lease period later if it is still there."""
        timeout, began = self.task.timeout, self.task.started
        if not timeout or began is None or time.time() < began + timeout:
            return
        if not self.timed_out.is_set():
            self.timed_out.set()
            logger.warning("task %s: timed out after %g s with its listener gone; stopping",
                           self.id, timeout)
            os.kill(os.getpid(), signal.SIGTERM)
        else:
            os.killpg(os.getpid(), signal.SIGKILL)


def current_task():
    """The RunningTask of this process, or None outside a task."""
    return _current


def set_current_task(running):
    global _current
    _current = running
