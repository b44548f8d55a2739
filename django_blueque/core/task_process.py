"""The process that runs one task: forked by the listener, handed its task through a pipe
(channel.py), it runs the callback, records its end and exits.

It renews the task's lease (lease.py) from before the callback starts until its end is
recorded, as its listener does, so the task survives its listener and is never recovered
while it runs. It records its end itself, as patiently as the lease is kept: while Redis is
away, it waits and tries again; a result is never dropped because Redis restarted or failed
over.
"""

import contextlib
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
from .channel import TASK_ENDED, handed_task, read_line
from .connections import for_task_process
from .context import RunningTask, StopRequested, current_task, set_current_task
from .lease import Beacon, LeaseKeeper
from .limits import limited, own_usage
from .outages import Outage, is_transient
from .protocol import new_token
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

    def __init__(self, protocol: Any, listener_id: str, callback: Any, policy: Any, *,
                 on_task_end: Any = None, beacon: Beacon | None = None,
                 kill_grace: float = 10.0, around_task: Any = None) -> None:
        self.protocol = protocol
        self.listener_id = listener_id
        self.callback = callback
        self.policy = policy
        self.on_task_end = on_task_end
        self.beacon = beacon
        self.kill_grace = kill_grace
        # (queue, task, listener id) -> the context manager a run goes on in (tracing, ...)
        self.around_task = around_task or (lambda *task: contextlib.nullcontext())

    def main(self, channel: int, listener: int, connect: bool = False) -> NoReturn:
        """Wait for a task on ``channel`` (channel.py), run it, record its end, say so, and
        exit (never returns). ``listener``: the pid of the listener that forked it.
        ``connect``: a spare about to be used connects while it waits (a process forked for a
        take at once would meet that take at Redis, and delay it)."""
        code, task_id = 0, None
        try:
            os.setsid()
            for signum in (signal.SIGINT, signal.SIGCHLD, signal.SIGHUP):
                signal.signal(signum, signal.SIG_DFL)
            signal.signal(signal.SIGTERM, _on_stop_signal)
            for_task_process(self.protocol.redis, self.protocol.timings.renew_every)
            if connect:
                with contextlib.suppress(redis.RedisError):  # the lease thread reports outages
                    self.protocol.redis.ping()
            line = read_line(channel)
            if line:
                queue, token, task_id, fields, taken_at = handed_task(line)
                task = Task(task_id, fields)
                renewed_at = self._lease_confirmed(queue, task, token, taken_at)
                if renewed_at is not None:
                    with self.around_task(queue, task, self.listener_id):
                        code = self._run(queue, task, token, listener, renewed_at)
        except StopRequested:
            code = 128 + signal.SIGTERM
        except BaseException:
            logger.exception("task %s: its process failed outside the task", task_id)
            code = 1
        finally:
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
            if code == 0:  # its end is recorded (or it had nothing to run): its slot is free
                with contextlib.suppress(OSError):  # the listener is gone
                    socket.socket(fileno=channel).send(TASK_ENDED, socket.MSG_NOSIGNAL)
            os._exit(code)

    def _lease_confirmed(self, queue: str, task: Task, token: str, taken_at: float
                         ) -> float | None:
        """When the task's lease was last set (monotonic), or None if it is no longer ours. A
        task handed over late (its listener was stopped between the take and the hand-over)
        may have been recovered and given to another process meanwhile: its token is
        confirmed with Redis before its code starts, waiting while Redis is away."""
        late = time.monotonic() - taken_at
        timings = self.protocol.timings
        if late < timings.handover:
            return taken_at
        outage = Outage(logger, f"task {task.id}: confirming a late hand-over")
        while True:
            sent = time.monotonic()
            try:
                held, _ = self.protocol.renew_lease(
                    task.id, token, timings.for_queue(self.policy(queue)).lease)
                break
            except redis.RedisError as exc:
                time.sleep(outage.failed(exc))
        if not held:
            logger.warning("task %s: handed over %.1f s after it was taken, and taken from "
                           "this process meanwhile: not run here", task.id, late)
        return sent if held else None

    def _run(self, queue: str, task: Task, token: str, listener: int, renewed_at: float
             ) -> int:
        policy = self.policy(queue)
        timeout = positive_seconds(task.fields.get("timeout")) or policy.get("timeout")
        running = RunningTask(self.protocol, task, token, timeout, queue)
        set_current_task(running)
        LeaseKeeper(running, parents=(listener,), own_process=True, beacon=self.beacon,
                    timings=self.protocol.timings.for_queue(policy),
                    kill_grace=self.kill_grace, renewed_at=renewed_at).start()
        code = ""  # the exception's code attribute, for the error history
        try:
            with limited(policy):  # its memory and CPU limits (limits.py)
                value = encode_result(self.callback(task))
            if running.stop_signalled.is_set():  # it saw should_stop() and ended early
                raise StopRequested("ended early, as asked")
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
        end_id = new_token()  # the same on each try: a try whose reply was lost is answered
        used = own_usage()  # its peak memory and CPU time, recorded with its end
        recorded = record_end(running, lambda: self.protocol.finish(
            queue, task.id, listener_id=self.listener_id, pid=os.getpid(), token=token,
            policy=policy, outcome=outcome, value=value, error_type=error_type,
            traceback=trace, error_code=code, retryable=error_type != k.CANCELLED,
            end_id=end_id, usage=used))
        if recorded == "stale":
            logger.warning("task %s: its end was not recorded: the task was recovered "
                           "elsewhere while this run went on (see the lease)", task.id)
        if self.on_task_end:
            self.on_task_end(task, recorded, value, error_type)
        return 0


def run_with_processor(client: Any, task: Task, callback: Any) -> NoReturn:
    """blueque 1.0's way, in a process forked for a reserved task: record its start and its
    end through a Processor, then exit (ForkingRunner.fork_task)."""
    try:
        os.setsid()
        processor = client.get_processor(task)
        if processor.start(os.getpid()):
            try:
                value = encode_result(callback(task))
            except BaseException as exc:
                processor.fail(*error_fields(exc), error_code=error_code(exc))
            else:
                processor.complete(value)
    except BaseException:
        logger.exception("task %s: its process failed outside the task", task.id)
    finally:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def record_end(running, step):
    """Record a task's end with ``step`` (a protocol.finish call), retrying while Redis is
    away for as long as it takes, and REFUSALS_TOLERATED times on other errors.
    ``running.ending`` is set first: the lease keeper, which goes on renewing between tries,
    then takes a lease found gone for this recording's doing, not a recovery;
    ``running.finished`` is set once it is recorded."""
    running.ending.set()
    outage = Outage(logger, f"task {running.id}: recording its end")
    refusals = 0
    while True:
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


def _on_stop_signal(signum, frame):
    """SIGTERM: the listener stops this task (cancel, timeout). Code that watches should_stop()
    is told so and ends at its next look; other code gets StopRequested now."""
    running = current_task()
    if running:
        running.stop_signalled.set()
        if running.watches_stop:
            return
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
