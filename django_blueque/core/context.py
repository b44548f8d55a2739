"""What a task's code can reach while it runs, without anything passed through its arguments."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from .lease import LeaseKeeper

if TYPE_CHECKING:
    from .protocol import Protocol
    from .task import Task

# a process runs one task at a time: the forked child sets it once
_current: RunningTask | None = None


class StopRequested(BaseException):
    """Raised in a task's process when its listener stops it (cancellation, timeout).

    A BaseException, like KeyboardInterrupt, so a task's ``except Exception`` does not swallow
    it; ``finally`` blocks and context managers still run.
    """


class RunningTask:
    """The task being run by this process: its id, attempt and a way to report progress."""

    def __init__(self, protocol: Protocol, task: Task, token: str, timeout: float | None = None,
                 queue: str | None = None) -> None:
        self.protocol = protocol
        self.cancel_requested = threading.Event()
        self.lease_lost = threading.Event()
        self.finished = threading.Event()
        self.timed_out = threading.Event()  # stopped by its own deadline (listener gone)
        # held while the end is recorded or the lease renewed: the two never cross, so a
        # renewal never finds the lease gone because this process just recorded its end
        self.recording = threading.Lock()
        self.assign(task, token, timeout, queue)

    def assign(self, task: Task, token: str, timeout: float | None = None,
               queue: str | None = None) -> None:
        """Make this the run of ``task``. A task process builds its RunningTask on made-up
        values while it waits for its task (four events cost a process just forked 0.1 ms),
        then assigns it the task it is handed."""
        self.task = task
        self.id = task.id
        # the queue it was taken from, which chooses the code that runs it: the hash's own
        # 'queue' field is data anyone who can write to Redis may have changed
        self.queue = queue or task.queue
        self.token = token
        self.attempt = task.attempts or 1  # counted when the run started
        self.timeout = timeout  # seconds this run may take: its own or its queue's

    def report_progress(self, percent: float, message: str = "") -> bool | None:
        """Record how far the task is (0..100) and a message anyone can read."""
        percent = float(percent)
        if not 0 <= percent <= 100:
            raise ValueError(f"progress must be between 0 and 100, not {percent}")
        if not isinstance(message, str):
            raise TypeError(f"progress message must be a string, not {type(message).__name__}")
        return self.protocol.report_progress(self.id, self.token, percent, message)

    def should_stop(self) -> bool:
        """True once someone asked to cancel this task: a long task can end cleanly."""
        return self.cancel_requested.is_set() or self.lease_lost.is_set()

    def keep_lease(self, parents: tuple[int, ...], own_process: bool = True) -> None:
        """Renew the lease from a daemon thread until ``finished`` is set (see lease.py)."""
        LeaseKeeper().keep(self, parents, own_process)


class NoTask(RunningTask):
    """What ``current_task()`` gives outside a task's process (a plain call, a unit test, eager
    mode), so task code runs unchanged there: progress is checked and goes nowhere, and
    nobody asks it to stop. False in a boolean test, as the None it replaces was."""

    # None outside a task: code that may run outside one tests ``if current_task():`` first
    id = queue = token = task = None  # type: ignore[assignment]
    attempt = 1

    class _Nowhere:
        @staticmethod
        def report_progress(task_id: object, token: object, percent: float, message: str
                            ) -> None:
            return None

    protocol = _Nowhere()  # type: ignore[assignment]  # what report_progress() calls

    def __init__(self) -> None:
        pass  # no task, no lease: nothing of RunningTask's state is used

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "<NoTask: not running in a listener>"

    def should_stop(self) -> bool:
        return False


_NO_TASK = NoTask()


def current_task() -> RunningTask:
    """The RunningTask of this process; outside a task, a NoTask stand-in (false in a
    boolean test)."""
    return _NO_TASK if _current is None else _current


def set_current_task(running: RunningTask | None) -> None:
    global _current
    _current = running
