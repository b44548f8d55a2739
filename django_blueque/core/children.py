"""The listener's task processes: forked ahead of need (a spare, spares.py), each given a task
as the listener takes it (reserved and started with the process's pid in one script, one
queue after another while slots are free) and handed it through a socket (channel.py), on
which it sends the task's end for the listener to record; watched until they exit, stopped on
a timeout or a cancellation (SIGTERM, then SIGKILL), and the end of one that died without
reporting recorded for it. A mixin of ForkingRunner (runner.py), whose state (children,
spare, backlog, policy) it shares."""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import redis

from . import keys as k
from .channel import Channel, rouse, task_line
from .outages import is_transient
from .protocol import HEARTBEAT_TTL, new_token
from .task_process import describe_exit, encode_result
from .values import Taken, error_code, error_fields, positive_seconds, printable

if TYPE_CHECKING:
    from .client import Client
    from .maintenance import Policy
    from .protocol import Protocol
    from .task import Task
    from .waiter import PendingWaiter
    from .wakeup import WakeupPipe

logger = logging.getLogger("django_blueque.listener")
task_logger = logging.getLogger("django_blueque.task")

BEGIN_WAIT = 0.05
"""How long the fork of the next spare waits for the task just handed over to begin: on a
machine of few cores, a fork (and the new process's connection) beside the hand-over delays the
task's code by a millisecond, so it comes once the task's process says its code is starting.
Not when more tasks wait in the queue: a drain needs the spare before the task ends."""

class Child:
    __slots__ = ("pid", "queue", "task_id", "token", "deadline", "timeout", "stop_reason",
                 "kill_at", "began", "handed", "label", "channel", "recorded", "more")

    def __init__(self, pid, queue, task_id, token, timeout):
        self.pid, self.queue, self.task_id, self.token = pid, queue, task_id, token
        self.began = time.monotonic()
        self.timeout = timeout
        self.deadline = self.began + timeout if timeout else None
        self.stop_reason = None
        self.kill_at = None
        self.handed = False  # the task reached the process: it may have begun
        self.label = printable(task_id)  # for log lines: an id from Redis may hold newlines
        self.channel: Channel | None = None
        self.recorded = False  # its end was recorded by the listener, on its word
        self.more = False  # more tasks waited in its queue when it was taken

    @property
    def exiting(self) -> bool:
        """Its end recorded, its socket closed (by the process on its way out, or by the
        listener as it answered, see Channel.last_word): its slot is free while it flushes
        its logs and the kernel tears it down (a millisecond or two, beside the next task)."""
        return self.recorded and (self.channel is None or not self.channel.open)


class TaskProcesses:
    """ForkingRunner's half that forks, hands over, watches and records its task processes."""

    if TYPE_CHECKING:  # ForkingRunner's state, shared with this half
        _client: Client
        _protocol: Protocol
        _callback: Callable[[Task], object]
        listener_id: str
        policy: Policy
        children: dict[int, Child]
        tasks_taken: int
        burst: bool
        kill_grace: float
        _backlog: list[Callable[[], object]]
        _spare: tuple[int, socket.socket] | None
        _on_task_end: Callable[[Task, str, Any, Any], object] | None
        _handover: tuple[Channel, float] | None  # the task last handed over, until when
        _unsure: dict[str, tuple[str, float, int]]
        _wakeup: WakeupPipe
        queues: list[str]
        _quarantine: dict[str, float]
        _waiters: dict[str, PendingWaiter]
        _rotation: int
        _lease: float
        _next_beat: float

        def _accepting(self) -> bool: ...
        def _can_take(self) -> bool: ...
        def _set_aside(self, queue: str, why: str, current: float) -> None: ...
        def _dropped(self, queue: str, found: Taken) -> None: ...
        def _ready_spare(self) -> tuple[int, socket.socket]: ...
        def _taken_ahead(self, current: float, unblock: bool = True
                         ) -> tuple[str, str, int, Taken] | None: ...
        def _withdraw_ahead(self, current: float, unblock: bool = True) -> None: ...

    def fork_task(self, task: Task) -> int:
        """blueque 1.0's: run a reserved task in a forked process, which records its start and
        its end through a Processor; returns the process's pid. (The runner's own loop hands
        tasks to processes forked ahead instead.)"""
        pid = os.fork()
        if pid:
            return pid
        try:
            os.setsid()
            processor = self._client.get_processor(task)
            if processor.start(os.getpid()):
                try:
                    value = encode_result(self._callback(task))
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

    def _close_channels(self) -> None:
        """Close this process's end of every running task's socket (on end of file, a task
        process records its own end)."""
        for child in self.children.values():
            if child.channel is not None:
                child.channel.close()

    def _take_tasks(self) -> list[str]:
        """Reserve and fork while slots are free, one task per queue in turn; returns the
        queues found empty."""
        empty: list[str] = []
        current = time.monotonic()
        for queue, until in list(self._quarantine.items()):
            if current >= until:
                del self._quarantine[queue]
        queues = [queue for queue in self.queues[self._rotation:] + self.queues[:self._rotation]
                  if not self._waiters[queue].armed  # armed: empty, and nothing came since
                  and queue not in self._quarantine]
        self._rotation = (self._rotation + 1) % len(self.queues)
        while queues and self._can_take():
            for queue in list(queues):
                if not self._can_take():
                    break
                try:
                    taken = self._take(queue, current)
                except redis.ResponseError as exc:
                    if is_transient(exc):
                        raise
                    queues.remove(queue)
                    self._set_aside(queue, str(exc), current)
                    continue
                if taken is None:
                    queues.remove(queue)
                    empty.append(queue)
                elif taken[1] == "skipped":
                    self._dropped(queue, taken)
                elif self._lease != HEARTBEAT_TTL:
                    self._next_beat = 0.0  # busy now: say so once the task is handed
        return empty

    def _take(self, queue: str, current: float) -> Taken | None:
        """Reserve the queue's next task and start it in the spare process, in one step (or
        collect what the take sent ahead took: take_ahead.py), and hand it over."""
        taken: Taken | None
        ahead = self._taken_ahead(current)
        if ahead is not None:
            _, token, pid, taken = ahead
        else:
            token = new_token()
            pid, _ = self._ready_spare()
            try:
                taken = self._protocol.take(queue, self.listener_id, token, pid)
            except (redis.ConnectionError, redis.TimeoutError):
                self._unsure[token] = (queue, current, pid)  # it may have run all the same
                raise
        if taken is not None:
            self._hand_over(queue, token, *taken)
            if taken[1] == "unstarted":
                raise redis.ResponseError(taken[2])  # the queue is set aside
        return taken

    def _hand_over(self, queue: str, token: str, task_id: str, outcome: str,
                   reply: dict[str, str] | int | str, more: bool) -> None:
        """After a take: the spare process runs the task it started (its fields go through
        the socket), or, if the start was refused, exits with nothing to run (a task reserved
        but refused by a key of the wrong type goes back to the queue once it has exited).
        Unless ``more`` tasks wait, the listener then waits for the task to begin (see
        BEGIN_WAIT): with more, the next spare is needed at once."""
        if outcome == "skipped":
            return
        assert self._spare is not None  # _take readied it
        pid, sock = self._spare
        self._spare = None
        fields = reply if isinstance(reply, dict) else {}
        handed = False
        if fields:  # sent first: the task's process gets on while the listener takes note
            try:
                sock.sendall(task_line(queue, token, task_id, fields))
                handed = True
            except OSError:
                pass  # the process died before it got the task: _child_ended puts it back
        self.tasks_taken += 1
        timeout = positive_seconds(fields.get("timeout")) or self.policy(queue).get("timeout")
        child = self.children[pid] = Child(pid, queue, task_id, token, timeout)
        if handed:
            child.handed, child.more = True, more
            child.channel = Channel(sock, lambda end: self._record_end(child, end),
                                    last_word=self._on_task_end is None)
            if not more:
                self._handover = (child.channel, time.monotonic() + BEGIN_WAIT)
            task_logger.info("task %s (%s) started in pid %d", printable(task_id), queue, pid)
            return
        sock.close()
        if outcome == "unstarted":
            task_logger.error("task %s (%s) not started: %s", printable(task_id), queue, reply)
            self._record_or_later(lambda: self._record_unstarted(child))
        elif not fields:
            task_logger.info("task %s (%s) not started: %s", printable(task_id), queue,
                             "cancelled" if reply == -1 else "no longer reserved here")

    def _handing(self) -> bool:
        """Whether the task last handed over is still on its way to its code: until then,
        and at most BEGIN_WAIT, the listener forks nothing, nor takes another task (which
        needs a spare)."""
        if self._handover is not None:
            channel, until = self._handover
            if channel.begun or not channel.open or time.monotonic() >= until:
                self._handover = None
        return self._handover is not None

    def _channels(self) -> list[Channel]:
        """The sockets of the running task processes, to wait on for their ends."""
        return [child.channel for child in self.children.values()
                if child.channel is not None and child.channel.open]

    def _record_end(self, child: Child, end: dict[str, Any]) -> str | None:
        """Record the end a task process sent (channel.py); None when Redis did not take it
        (the process then records it itself, patiently). With more tasks in its queue, the
        spare is roused first: its task comes once this process is out of its slot."""
        if child.more and self._spare is not None:
            rouse(self._spare[1])
        try:
            outcome = self._finish(child, end["outcome"], end["value"], end["error_type"],
                                   bool(end["retryable"]), end["traceback"], end["error_code"])
        except (redis.RedisError, KeyError, TypeError, ValueError) as exc:
            logger.info("listener %s: task %s: its process will record its end (%s)",
                        self.listener_id, child.label, exc)
            return None
        child.recorded = True
        return outcome

    def _child_ended(self, child, status):
        elapsed = time.monotonic() - child.began
        if child.channel is not None:
            child.channel.close()
        if status == 0 or child.recorded:
            # a task's process exits 0 only once its end is recorded (or it was not its to
            # run); one whose end the listener recorded may be stopped on its way out
            task_logger.info("task %s ended in %.3f s", child.label, elapsed)
            return
        if not child.handed:
            self._record_or_later(lambda: self._record_unstarted(child))
            return
        if child.stop_reason == "cancelled":
            error, kind, retryable = "cancelled", k.CANCELLED, False
        elif child.stop_reason == "timeout":
            error, kind, retryable = f"timed out after {child.timeout:g} s", "Timeout", True
        else:
            error, kind, retryable = describe_exit(status), "ProcessDied", True

        def record():
            outcome = self._finish(child, k.FAILED, error, kind, retryable)
            if outcome == "stale":
                task_logger.info("task %s ended in %.3f s", child.label, elapsed)
            else:
                task_logger.warning("task %s %s after %.3f s: %s", child.label,
                                    "will be retried" if outcome == "retry" else "failed",
                                    elapsed, error)

        self._record_or_later(record)

    def _put_back(self, queue: str, token: str, pid: int, task_id: str) -> None:
        """A task taken for a process that is not to run it: back to its queue, uncounted."""
        child = Child(pid, queue, task_id, token, None)
        self._record_or_later(lambda: self._record_unstarted(child))

    def _record_unstarted(self, child):
        """Its process was never handed the task (it died first, or the start was refused):
        back to the queue, uncounted."""
        if self._finish(child, "requeue", "") == "requeued":
            task_logger.warning("task %s never began in process %d; back to the queue",
                                child.label, child.pid)

    def _finish(self, child, outcome, value, error_type="", retryable=True, traceback="",
                error_code=""):
        return self._protocol.finish(
            child.queue, child.task_id, listener_id=self.listener_id, pid=child.pid,
            token=child.token, outcome=outcome, value=value, error_type=error_type,
            traceback=traceback, error_code=error_code, retryable=retryable,
            policy=self.policy(child.queue))

    def _record_or_later(self, record):
        """Record now, or once Redis answers again; a refusal that says the data is wrong is
        logged and dropped (the reaper recovers the task once its lease lapses)."""
        try:
            record()
        except redis.RedisError as exc:
            if is_transient(exc):
                self._backlog.append(record)
            else:
                task_logger.error("an end could not be recorded: %s", exc)

    def _flush_backlog(self) -> None:
        while self._backlog:
            record = self._backlog[0]
            try:
                record()
            except redis.RedisError as exc:
                if is_transient(exc):
                    raise
                task_logger.error("an end could not be recorded: %s", exc)
            self._backlog.pop(0)

    def _stop_child(self, child: Child, reason: str, current: float) -> None:
        child.stop_reason = reason
        child.kill_at = current + self.kill_grace
        self._signal_child(child, signal.SIGTERM)

    def _enforce_deadlines(self, current: float) -> None:
        for child in self.children.values():
            if child.deadline and not child.stop_reason and current >= child.deadline:
                task_logger.warning("task %s: timed out after %g s, stopping pid %d",
                                    child.label, child.timeout, child.pid)
                self._stop_child(child, "timeout", current)
            elif child.kill_at and current >= child.kill_at:
                task_logger.warning("task %s: pid %d still running %g s after SIGTERM, killing",
                                    child.label, child.pid, self.kill_grace)
                child.kill_at = None
                self._signal_child(child, signal.SIGKILL)

    @staticmethod
    def _signal_child(child, signum):
        """Signal the task's process group (its subprocesses too); the child may not have
        called setsid() yet, so fall back to the process alone."""
        try:
            os.killpg(child.pid, signum)
        except (ProcessLookupError, PermissionError):
            try:
                os.kill(child.pid, signum)
            except ProcessLookupError:
                pass

