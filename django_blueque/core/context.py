"""What a task's code can reach while it runs, without anything passed through its arguments."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .checkpoints import decode_checkpoint, encode_checkpoint, save_checkpoint
from .depends import dependency_results
from .progress import report_progress

if TYPE_CHECKING:
    from .protocol import Protocol
    from .task import Task

# a process runs one task at a time: the forked child sets it once
_current: RunningTask | None = None


class StopRequested(BaseException):
    """Raised in a task's process when its listener stops it (cancellation, timeout), unless
    its code watches ``should_stop()`` (see ``RunningTask.stop_signalled``).

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
        self.cut_off = threading.Event()  # nobody could renew its lease for a while (lease.py)
        # set once its code is done and its end is being recorded: a renewal that then finds
        # the lease gone was overtaken by that recording (or by a try whose reply was lost),
        # so the lease keeper stops quietly instead of ending the process
        self.ending = threading.Event()
        # its listener (or its own lease keeper) signalled it to stop (cancel, timeout): a
        # task whose code has called should_stop() is only told (it ends at its next look, or
        # is killed kill_grace later); any other gets StopRequested at once (task_process.py)
        self.stop_signalled = threading.Event()
        self.watches_stop = False
        self.task = task
        self.id = task.id
        # the queue it was taken from, which chooses the code that runs it: the hash's own
        # 'queue' field is data anyone who can write to Redis may have changed
        self.queue = queue or task.queue
        self.token = token
        self.attempt = task.attempts or 1  # counted when the run started
        self.timeout = timeout  # seconds this run may take: its own or its queue's
        self._checkpoint = task.fields.get("checkpoint")  # as stored (checkpoints.py)
        # turns a stored result into the value dependency_results gives (the Django registry
        # decodes its JSON); the stored string itself by default, as blueque 1.0 keeps it
        self.decode_result: Callable[[str], object] = str

    @property
    def dependency_results(self) -> dict[str, object]:
        """``{id: result}`` of the tasks this one waited for (``depends_on``), in the order
        given; None for one that failed (allowed by ``allow_failure``) or is gone. Read from
        Redis at each call."""
        stored = dependency_results(self.protocol.read_tasks, self.task)
        return {task_id: None if result is None else self.decode_result(result)
                for task_id, result in stored.items()}

    def report_progress(self, percent: float, message: str = "") -> bool | None:
        """Record how far the task is (0..100) and a message anyone can read. Never raises a
        Redis error: a report Redis cannot take now is delivered when it answers (progress.py).
        True if recorded, False if the task lost its lease, None if not delivered yet."""
        percent = float(percent)
        if not 0 <= percent <= 100:
            raise ValueError(f"progress must be between 0 and 100, not {percent}")
        if not isinstance(message, str):
            raise TypeError(f"progress message must be a string, not {type(message).__name__}")
        return report_progress(self.protocol, self.id, self.token, percent, message)

    @property
    def checkpoint_state(self) -> Any:
        """The state of the task's last checkpoint (this run's or an earlier run's), None if
        it has none; CheckpointError if its field holds something else than JSON."""
        return decode_checkpoint(self.id, self._checkpoint)

    def checkpoint(self, state: Any) -> bool:
        """Save ``state`` (JSON, at most MAX_CHECKPOINT_BYTES encoded) for a later run of this
        task to resume from. True if saved; False if this run lost its lease (a newer run's
        checkpoint is kept). Waits while Redis is away."""
        encoded = encode_checkpoint(state)
        saved = save_checkpoint(self.protocol.runs, self.id, self.token, encoded, self._stop_asked)
        if saved:
            self._checkpoint = encoded
        return saved

    def should_stop(self) -> bool:
        """True once the task should end early: someone asked to cancel it, its timeout came,
        or its lease was lost or could not be renewed for a while (lease.py). A task that calls
        it watches it: when it is stopped, it is told so here rather than interrupted by
        StopRequested, and has ``kill_grace`` seconds to end at a point of its choosing. Reads
        what this process saw, never Redis, so it cannot fail while Redis is away."""
        self.watches_stop = True
        return self._stop_asked()

    def _stop_asked(self) -> bool:
        return (self.cancel_requested.is_set() or self.stop_signalled.is_set()
                or self.lease_lost.is_set() or self.cut_off.is_set())


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

    @property
    def dependency_results(self) -> dict[str, object]:
        return {}

    @property
    def checkpoint_state(self) -> None:
        return None  # a plain call is always a first run

    def checkpoint(self, state: Any) -> None:  # type: ignore[override]
        """Checked as in a task (JSON, size), and kept nowhere: nothing runs this call again."""
        encode_checkpoint(state)


_NO_TASK = NoTask()


def current_task() -> RunningTask:
    """The RunningTask of this process; outside a task, a NoTask stand-in (false in a
    boolean test)."""
    return _NO_TASK if _current is None else _current


def set_current_task(running: RunningTask | None) -> None:
    global _current
    _current = running
