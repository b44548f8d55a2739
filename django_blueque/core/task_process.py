"""The process that runs one task: forked by the listener ahead of time, handed its task
through a socket (channel.py), it runs the callback, has its end recorded and exits.

It holds the task's lease (lease.py) from before the callback starts until its end is
recorded, so the task survives its listener and is never recovered while it runs. Its end is
recorded by the listener when it answers (no connection of the process's own: see channel.py),
else by the process itself, as patiently as the lease is kept: while Redis is away, it waits
and tries again; a result is never dropped because Redis restarted or failed over.
"""

import json
import logging
import os
import signal
import socket
import sys
import time
from typing import Any, NoReturn

import redis

from . import keys as k
from .channel import ask_to_record, handed_task, read_task, say_begun, task_line
from .context import RunningTask, StopRequested, set_current_task
from .lease import LeaseKeeper
from .outages import Outage, is_transient
from .task import Task
from .values import error_code, error_fields, positive_seconds

logger = logging.getLogger("django_blueque.task")

REFUSALS_TOLERATED = 3
"""Attempts a task's process makes to record its end when Redis refuses the command for
another reason than being away (an error that says the data is wrong, which waiting does not
mend); while Redis is away, it keeps trying for as long as it takes."""


def encode_result(result):
    """A task's return value as a wire string: strings (and bytes, ints, floats, as blueque 1.0
    accepted) as they are, anything else as JSON (blueque 1.0 failed on None or a dict)."""
    if isinstance(result, (str, bytes, int, float)) and not isinstance(result, bool):
        return result
    try:
        return json.dumps(result)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"the task returned a {type(result).__name__} that cannot be encoded "
                        f"as JSON: {exc}") from None


class TaskProcess:
    """What a forked task process needs from its listener, and its main()."""

    def __init__(self, protocol: Any, listener_id: str, callback: Any, policy: Any,
                 on_task_end: Any = None) -> None:
        self.protocol = protocol
        self.listener_id = listener_id
        self.callback = callback
        self.policy = policy
        self.on_task_end = on_task_end

    def main(self, handover: socket.socket, parents: tuple[int, ...]) -> NoReturn:
        """Wait for a task on the ``handover`` socket (channel.py), run it, have its end
        recorded, and exit (never returns). ``parents``: the pids of the listener and of the
        fork server that forked it, if any (its parent is one of them until the listener
        dies)."""
        code, task_id = 0, None
        try:
            os.setsid()
            for signum in (signal.SIGINT, signal.SIGCHLD, signal.SIGHUP):
                signal.signal(signum, signal.SIG_DFL)
            signal.signal(signal.SIGTERM, _raise_stop)
            keeper = LeaseKeeper(begun=lambda: say_begun(handover))
            keeper.start()  # a thread's first start costs most: done before the task comes
            queue, task, token = self._rehearse()
            running = RunningTask(self.protocol, task, token, None, queue)  # events made ahead
            set_current_task(running)  # assigned its task when it comes: one write fewer then
            handed = read_task(handover, on_rouse=self._rehearse)
            if handed:
                queue, task, token = _handed(handed)
                task_id = task.id
                code = self._run(queue, task, token, running, keeper, parents, handover)
        except StopRequested:
            code = 128 + signal.SIGTERM
        except BaseException:
            logger.exception("task %s: its process failed outside the task", task_id)
            code = 1
        finally:
            handover.close()  # its listener frees its slot now: the task's work is done
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)

    def _rehearse(self) -> tuple[str, Task, str]:
        """Go along the task's way from its hand-over to its code on made-up values, while
        waiting for it: a forked process pays a copy-on-write fault (5-15 us on this path)
        the first time it writes each page it shares with its listener, and the first call
        of a function writes its function object (a reference) and its code object (a call
        count). Again when roused (the task is coming), which finds that way in the
        processor's caches. Returns the made-up queue, task and token."""
        queue, task, token = _handed(REHEARSAL)
        positive_seconds(task.fields.get("timeout"))
        _touch(self._run, self.callback, self.policy, LeaseKeeper.keep)
        return queue, task, token

    def _run(self, queue, task, token, running, keeper, parents, handover):
        policy = self.policy(queue)
        timeout = positive_seconds(task.fields.get("timeout")) or policy.get("timeout")
        running.assign(task, token, timeout, queue)
        # the thread that renews its lease (set by the take, for LEASE_TTL) tells the listener
        # the task began once the task's code runs: woken now, it runs when that code first
        # waits, or 5 ms on. Told from here, the listener forked its next spare beside the
        # task's first line, and delayed it by the fork's milliseconds one time in ten
        keeper.keep(running, parents, own_process=True)
        code = ""  # the exception's code attribute, for the error history
        try:
            value = encode_result(self.callback(task))
            outcome, error_type, trace = k.COMPLETE, "", ""
            if running.cancel_requested.is_set():
                # it saw should_stop() and ended early: what the operator asked for
                outcome, value, error_type = k.FAILED, "cancelled", k.CANCELLED
        except StopRequested:
            if running.cancel_requested.is_set():
                outcome, value, error_type, trace = k.FAILED, "cancelled", k.CANCELLED, ""
            elif running.timed_out.is_set():
                outcome, error_type, trace = k.FAILED, "Timeout", ""
                value = f"timed out after {timeout:g} s"
            else:
                raise  # stopped by the listener, which records why
        except BaseException as exc:
            outcome = k.FAILED
            value, error_type, trace = error_fields(exc)
            code = error_code(exc)
            logger.error("task %s failed: %s", task.id, value, exc_info=True)
        end = {"outcome": outcome, "value": value, "error_type": error_type, "traceback": trace,
               "error_code": code, "retryable": error_type != k.CANCELLED}
        recorded = record_end(running, lambda: self.protocol.finish(
            queue, task.id, listener_id=self.listener_id, pid=os.getpid(), token=token,
            policy=policy, **end), ask=lambda: ask_to_record(handover, end))
        if recorded == "stale":
            logger.warning("task %s: its end was not recorded: the task was recovered "
                           "elsewhere while this run went on (see the lease)", task.id)
        if self.on_task_end:
            self.on_task_end(task, recorded, value, error_type)
        return 0


def record_end(running, step, ask=None):
    """Record a task's end: by ``ask`` (its listener; returns the outcome, or None), else with
    ``step`` (a protocol.finish call), retrying while Redis is away for as long as it takes,
    and REFUSALS_TOLERATED times on other errors. Each attempt holds ``running.recording``, so
    the lease keeper (which goes on renewing between attempts) never sees the lease that the
    recording just released; ``running.finished`` is set with it."""
    if ask is not None:
        with running.recording:
            outcome = ask()
            if outcome is not None:
                running.finished.set()
                return outcome
    outage = Outage(logger, f"task {running.id}: recording its end")
    refusals = 0
    while True:
        with running.recording:
            try:
                outcome = step()
            except redis.RedisError as exc:
                refusals += not is_transient(exc)
                if refusals >= REFUSALS_TOLERATED:
                    raise
                pause = outage.failed(exc)
            else:
                running.finished.set()
                outage.recovered()
                return outcome
        time.sleep(pause)


REHEARSAL = task_line("queue", "0" * 32, "00000000-0000-0000-0000-000000000000", {
    "created": "1795843005.3611856", "pid": "7531", "started": "1795843005.361736",
    "lease": "0" * 32, "queue": "queue", "updated": "1795843005.361736", "status": "started",
    "parameters": "[]", "node": "host~00000000_0000", "attempts": "1"})
"""A made-up hand-over of a real one's shape (its strings of the same sizes take their memory
where the real ones will), bytes as they are (json.loads takes another way for a str)."""


def _handed(line: bytes) -> tuple[str, Task, str]:
    """The queue, task and token of a hand-over line."""
    queue, token, task_id, fields = handed_task(line)
    return queue, Task(task_id, fields), token


def _touch(*functions: Any) -> None:
    """Write once to the pages of ``functions`` and of their code objects (a reference taken
    and dropped), as their first calls will."""
    for function in functions:
        getattr(function, "__code__", None)


def _raise_stop(signum, frame):
    raise StopRequested(f"stopped by signal {signum}")


def describe_exit(status: int) -> str:
    """What the exit status of a child that did not report says, in words."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = "unknown"
        return f"process killed by signal {number} ({name})"
    code = os.waitstatus_to_exitcode(status)
    if code:
        return f"process exited with status {code} without reporting a result"
    return "process exited without reporting a result"
