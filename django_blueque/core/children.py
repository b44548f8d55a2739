"""The listener's task processes, from their fork to their exit.

A task process goes through these states (``Child.state``), each change made here:

=========  ===========================================================  =====================
state      what holds                                                   left when
=========  ===========================================================  =====================
forked     forked, waiting on its channel; the take names its pid       handed, or let go
running    handed its task; it renews its lease, and so does the        asked to stop, says
           listener at each heartbeat (lease.py); it records its end    it ended, or exits
stopping   SIGTERM sent (timeout, cancellation); SIGKILL at             says it ended, or
           ``kill_at``                                                  exits
ended      it recorded its end and said so on its channel               it exits
           (channel.py); on its way out, its slot is free
=========  ===========================================================  =====================

A process forked ahead, before there is a take to name it, is the listener's spare
(``Spare``), ``forked`` too. The busy slots are the processes running or stopping a task. A
process leaves ``children`` when ``waitpid`` reports its exit: status 0 means its end is
recorded (or it had nothing to run); any other status is recorded here as a failed run,
guarded by the reservation's token, so an end the process recorded first is never
overwritten. A process that died before its task came sends the task back to its queue,
uncounted; if that repeats, forks pause, doubling from FORK_PAUSE to MAX_FORK_PAUSE.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import redis

from . import keys as k
from .channel import TASK_ENDED, task_line, write_line
from .lease import CUT_OFF_EXIT
from .limits import died_of_limit, usage
from .outages import is_transient
from .task_process import TaskProcess, describe_exit
from .values import positive_seconds, printable

if TYPE_CHECKING:
    from .maintenance import Policy
    from .protocol import Protocol

logger = logging.getLogger("django_blueque.listener")
task_logger = logging.getLogger("django_blueque.task")

FORK_PAUSE, MAX_FORK_PAUSE = 0.1, 5.0
"""Seconds forks wait after a task process died before its task, doubling while it repeats."""

FORKED, RUNNING, STOPPING, ENDED = "forked", "running", "stopping", "ended"


class Child:
    """One task process (see the states above)."""

    __slots__ = ("pid", "channel", "state", "queue", "task_id", "token", "label", "began",
                 "timeout", "deadline", "stop_reason", "kill_at")

    def __init__(self, pid: int, channel: int) -> None:
        self.pid, self.channel = pid, channel  # the listener's end of its socket pair, or -1
        self.state = FORKED
        self.queue = self.task_id = self.token = self.label = ""
        self.began = time.monotonic()
        self.timeout: float | None = None
        self.deadline: float | None = None
        self.stop_reason: str | None = None
        self.kill_at: float | None = None


class Spare:
    """The one task process forked ahead, so that a take does not wait for a fork.

    =======  ======================================  ======================================
    state    what holds                              left when
    =======  ======================================  ======================================
    none     no spare                                forks may start (not during their
                                                     pause), and the listener is about to
                                                     wait with a slot free after a round
                                                     that handed over nothing, or a take
                                                     says more tasks wait: forked, ready
    ready    forked, waiting on its channel; not     the next take names it (it is that
             counted among the busy slots            take's process from then on, let go if
                                                     the take found nothing): none; the
                                                     listener stops taking: let go, none;
                                                     it dies: none
    =======  ======================================  ======================================

    A fork and what follows it would cost a pickup about 2.5 ms here (the fork, then the
    copy-on-write faults of the take that names the new process); a spare costs an idle
    listener about 1.4 MiB (the pages either process writes after the fork are copied):
    bench/README.md. The next spare is not forked right after a hand-over: a fork then slows
    the process just handed its task by about as much (its first writes to the pages it shares
    with the listener wait for the fork), unless more tasks wait and the next take would wait
    for it. A spare whose listener dies reads the end of its channel and exits. A spare that
    dies is reaped as any process that died before its task: forks pause, doubling from
    FORK_PAUSE to MAX_FORK_PAUSE, one log line per change of the pause
    (``TaskProcesses._pause_forks``), never a loop of forks.
    """

    def __init__(self, processes: TaskProcesses) -> None:
        self._processes = processes
        self._child: Child | None = None

    def want(self, current: float, connect: bool = False) -> None:
        """Fork one ahead unless there is one, or forks pause (``connect``: see ``fork``)."""
        if self._child is None and self._processes.can_fork(current):
            self._child = self._processes.fork(connect)

    def take(self) -> Child | None:
        """The spare, for a take to name (None if there is none)."""
        child, self._child = self._child, None
        return child

    def gone(self, child: Child) -> None:
        """``child`` was reaped: if it was the spare, there is none now."""
        if child is self._child:
            self._child = None

    def drop(self) -> None:
        """Let the spare go: the listener takes nothing more."""
        child, self._child = self._child, None
        if child is not None:
            self._processes.let_go(child)


class TaskProcesses:
    """The listener's task processes: forks them, hands them their tasks, watches their
    deadlines, stops them, and records the end of those that die without recording it."""

    def __init__(self, protocol: Protocol, listener_id: str, process: TaskProcess,
                 policy: Policy, kill_grace: float,
                 before_fork: Callable[[], object] | None,
                 in_child: Callable[[], object]) -> None:
        self.protocol = protocol
        self.listener_id = listener_id
        self.process = process
        self.policy = policy
        self.kill_grace = kill_grace
        self.before_fork = before_fork
        self.in_child = in_child  # closes in a new process what is the listener's
        self.children: dict[int, Child] = {}
        self.backlog: list[Callable[[], object]] = []  # ends to record once Redis answers
        self.fork_pause = 0.0
        self.forks_from = 0.0  # monotonic time before which nothing is forked
        self.spare = Spare(self)

    def __len__(self) -> int:
        """The busy slots: the processes running or stopping a task."""
        return len(self.running())

    def running(self) -> list[Child]:
        return [child for child in self.children.values() if child.state in (RUNNING, STOPPING)]

    def channels(self) -> dict[int, Child]:
        """The processes that may yet say their task ended, by their channel."""
        return {child.channel: child for child in self.running() if child.channel >= 0}

    def heard_from(self, child: Child) -> None:
        """``child``'s channel is readable: it says its task ended (its slot is free now), or
        it is gone (its exit, reaped next, tells the rest)."""
        try:
            said = os.read(child.channel, 1)
        except OSError:
            said = b""
        self.let_go(child)
        if said == TASK_ENDED:
            child.state = ENDED

    def can_fork(self, current: float) -> bool:
        return current >= self.forks_from

    # -- fork and hand over ------------------------------------------------------------------

    def for_take(self) -> Child:
        """The process a take names: the spare if there is one, else a new one."""
        return self.spare.take() or self.fork()

    def fork(self, connect: bool = False) -> Child:
        """A new task process, waiting on its channel for the task it is to run; with
        ``connect``, connected to Redis meanwhile (a spare forked because more tasks wait: in
        a drain of short tasks its end would otherwise wait for a connection; an idle spare
        does not connect, as its connection would cost memory and a socket for hours)."""
        ours, theirs = (end.detach() for end in socket.socketpair())
        if self.before_fork:
            self.before_fork()
        listener = os.getpid()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(ours)
                self.in_child()
                self.process.main(theirs, listener, connect)
            finally:
                os._exit(1)  # never back into the listener's code
        os.close(theirs)
        child = self.children[pid] = Child(pid, ours)
        return child

    def let_go(self, child: Child) -> None:
        """Close ``child``'s channel: a forked process with nothing to run then exits."""
        if child.channel >= 0:
            os.close(child.channel)
            child.channel = -1

    def hand_over(self, child: Child, queue: str, token: str, task_id: str, outcome: str,
                  reply: dict[str, str] | int | str, taken_at: float, more: bool) -> None:
        """After a take with ``child``'s pid: write it its task if the start went through,
        and fork the next spare at once if ``more`` tasks wait; else let it go (a task whose
        start a key of the wrong type refused goes back to its queue once the process
        exited)."""
        child.queue, child.task_id, child.token = queue, task_id, token
        child.began = taken_at  # a spare may have waited: its task's time starts at its take
        child.label = printable(task_id)  # for log lines: an id from Redis may hold newlines
        fields = reply if isinstance(reply, dict) else {}
        if fields:
            if write_line(child.channel, task_line(queue, token, task_id, fields, taken_at)):
                if self.fork_pause:
                    logger.info("listener %s: task processes start again", self.listener_id)
                    self.fork_pause = 0.0
                child.state = RUNNING
                child.timeout = (positive_seconds(fields.get("timeout"))
                                 or self.policy(queue).get("timeout"))
                child.deadline = child.began + child.timeout if child.timeout else None
                task_logger.info("task %s (%s) started in pid %d", child.label, queue, child.pid)
                if more:
                    self.spare.want(taken_at, connect=True)
                return
        self.let_go(child)
        if outcome == "unstarted":
            task_logger.error("task %s (%s) not started: %s", child.label, queue, reply)
        elif not fields:
            task_logger.info("task %s (%s) not started: %s", child.label, queue,
                             "cancelled" if reply == -1 else "no longer reserved here")

    # -- watch -------------------------------------------------------------------------------

    def collect(self) -> None:
        """Reap every exited process and record the end of those that did not."""
        while True:
            try:
                pid, status, rusage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            child = self.children.pop(pid, None)
            if child is not None:
                self.spare.gone(child)
                self.let_go(child)
                self._ended(child, status, usage(rusage))

    def _ended(self, child: Child, status: int, used: dict[str, float]) -> None:
        elapsed = time.monotonic() - child.began
        if child.state == FORKED:
            if child.task_id:  # taken for it, never handed: back to the queue
                self._record_or_later(lambda: self._record_unstarted(child))
            if status != 0:
                self._pause_forks(child, status)
            return
        if status == 0:  # its end is recorded (or the task was not its to run)
            task_logger.info("task %s ended in %.3f s", child.label, elapsed)
            return
        if child.stop_reason == "cancelled":
            error, kind, retryable = "cancelled", k.CANCELLED, False
        elif child.stop_reason == "timeout":
            error, kind, retryable = f"timed out after {child.timeout:g} s", "Timeout", True
        elif os.WIFEXITED(status) and os.WEXITSTATUS(status) == CUT_OFF_EXIT:
            timings = self.protocol.timings.for_queue(self.policy(child.queue))
            error, kind, retryable = (
                f"its process could not reach Redis for {timings.cut_off + self.kill_grace:g} "
                f"s (nor could its listener) and stopped", "CutOff", True)
        else:
            error, kind = died_of_limit(self.policy(child.queue), status, used) or (
                describe_exit(status), "ProcessDied")
            retryable = True

        def record() -> None:
            outcome = self._finish(child, k.FAILED, error, kind, retryable, used)
            if outcome == "stale":
                task_logger.info("task %s ended in %.3f s", child.label, elapsed)
            else:
                task_logger.warning("task %s ended after %.3f s: %s; %s", child.label, elapsed,
                                    error, "it will be retried" if outcome == "retry"
                                    else "it failed")

        self._record_or_later(record)

    def _pause_forks(self, child: Child, status: int) -> None:
        """A process died before its task: fork again after a doubling pause, not at once."""
        pause = min(max(self.fork_pause * 2, FORK_PAUSE), MAX_FORK_PAUSE)
        if pause != self.fork_pause:
            logger.warning("listener %s: task process %d %s before its task; forking again in "
                           "%g s", self.listener_id, child.pid, describe_exit(status), pause)
        self.fork_pause = pause
        self.forks_from = time.monotonic() + pause

    def _record_unstarted(self, child: Child) -> None:
        if self._finish(child, "requeue", "") == "requeued":
            task_logger.warning("task %s never began in process %d; back to the queue",
                                child.label, child.pid)

    def _finish(self, child: Child, outcome: str, value: str, error_type: str = "",
                retryable: bool = True, used: dict[str, float] | None = None) -> Any:
        return self.protocol.finish(
            child.queue, child.task_id, listener_id=self.listener_id, pid=child.pid,
            token=child.token, outcome=outcome, value=value, error_type=error_type,
            retryable=retryable, policy=self.policy(child.queue), usage=used)

    def _record_or_later(self, record: Callable[[], object]) -> None:
        """Record now, or once Redis answers again; a refusal that says the data is wrong is
        logged and dropped (the reaper recovers the task once its lease lapses)."""
        try:
            record()
        except redis.RedisError as exc:
            if is_transient(exc):
                self.backlog.append(record)
            else:
                task_logger.error("an end could not be recorded: %s", exc)

    def flush_backlog(self) -> None:
        while self.backlog:
            try:
                self.backlog[0]()
            except redis.RedisError as exc:
                if is_transient(exc):
                    raise
                task_logger.error("an end could not be recorded: %s", exc)
            self.backlog.pop(0)

    # -- stop --------------------------------------------------------------------------------

    def stop(self, child: Child, reason: str, current: float) -> None:
        """SIGTERM now (its process group: its subprocesses too), SIGKILL kill_grace later."""
        child.state, child.stop_reason = STOPPING, reason
        child.kill_at = current + self.kill_grace
        _signal(child.pid, signal.SIGTERM)

    def enforce_deadlines(self, current: float) -> None:
        for child in self.children.values():
            if child.state == RUNNING and child.deadline and current >= child.deadline:
                task_logger.warning("task %s: timed out after %g s, stopping pid %d",
                                    child.label, child.timeout, child.pid)
                self.stop(child, "timeout", current)
            elif child.kill_at and current >= child.kill_at:
                task_logger.warning("task %s: pid %d still running %g s after SIGTERM, killing",
                                    child.label, child.pid, self.kill_grace)
                child.kill_at = None
                _signal(child.pid, signal.SIGKILL)

    def next_deadline(self) -> float:
        times = [child.deadline for child in self.children.values()
                 if child.state == RUNNING and child.deadline]
        times += [child.kill_at for child in self.children.values() if child.kill_at]
        return min(times, default=float("inf"))

    def cancel(self, task_ids: list[str], current: float) -> None:
        for child in self.children.values():
            if child.task_id in task_ids and child.state == RUNNING:
                logger.info("task %s: cancellation requested, stopping pid %d", child.label,
                            child.pid)
                self.stop(child, "cancelled", current)

    def let_all_go(self) -> None:
        """At the listener's end: processes still waiting for a task exit."""
        for child in self.children.values():
            self.let_go(child)


def freeze_heap() -> bool:
    """Move every object the listener holds out of the garbage collector's reach (gc.freeze),
    once, before its first fork: a task process's full collection would otherwise copy every
    page of the listener's heap. Returns whether nothing was frozen before: run() then
    unfreezes on return (else the program that embeds it froze objects of its own)."""
    first = not gc.get_freeze_count()
    gc.collect()
    gc.freeze()
    return first


def _signal(pid: int, signum: int) -> None:
    """Signal the process group (a task's subprocesses too); the process may not have called
    setsid() yet, so fall back to the process alone."""
    try:
        os.killpg(pid, signum)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass
