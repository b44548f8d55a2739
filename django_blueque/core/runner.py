"""The forking runner: a listener that runs up to N tasks at a time, one forked process each.

One thread, one ``poll()``: the listener waits at once on two blocking peeks per queue
(waiter.py: they return as soon as a task comes, and take nothing), on signals and its
children's exits (through a wake-up pipe, wakeup.py), on its task processes' word that their
task ended (channel.py), and on the next timer (heartbeat, timeouts, kill escalations). So it
sends nothing while idle but its heartbeat, and starts a task within milliseconds of its
enqueue. Only a listener that is awake takes a task: when a peek returns, it reserves and
starts the task in one atomic script (``take``) with the pid of its spare, a task process
forked ahead, and hands the task over (children.py, channel.py).

Liveness (heartbeat.py, lease.py): at each heartbeat the listener renews the lease of every
task process it knows is alive, and each task process renews its own, so a task keeps its
lease whatever its code does to its own process, and outlives its listener. A task process
records its own end; the listener records the end of one that died without recording it,
guarded by the reservation token so a result already recorded is never overwritten.

Stopping: the first SIGTERM or SIGINT makes the listener take no new task and wait for its
running tasks to end (waiting is the one way that never repeats hours of work). A second one
stops at once: running tasks are left to finish in their own processes, which hold their own
leases and record their own results; if they die, the reaper recovers their tasks.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import select
import signal
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from types import FrameType
from typing import TYPE_CHECKING, Any, cast

import redis

from . import keys as k
from .admission import Admission
from .children import TaskProcesses, freeze_heap
from .heartbeat import Heartbeat
from .lost_takes import LostTakes
from .orphans import recover_local_orphans
from .outages import Outage, is_transient
from .protocol import new_token
from .task_process import TaskProcess, run_with_processor
from .values import printable
from .waiter import ListenedQueues, deaf
from .wakeup import WakeupPipe

if TYPE_CHECKING:
    from .client import Client
    from .maintenance import Policy
    from .task import Task

logger = logging.getLogger("django_blueque.listener")

SET_ASIDE_SECONDS = 10.0
"""How long a queue whose keys hold data of the wrong type is left alone before another try."""


class ForkingRunner:
    """blueque 1.0's ``ForkingRunner(client, queue, callback).run()``, extended.

    ``queue`` may be a list of queues. ``callback(task)`` runs in a forked process and returns
    the result (a string, or anything JSON can encode). Keyword options: ``concurrency`` (tasks
    at once), ``burst`` (return once the queues are empty and nothing runs), ``max_tasks``,
    ``kill_grace`` (seconds between SIGTERM and SIGKILL when stopping a task), ``policy``
    (``queue -> {'retries', 'backoff', 'timeout', 'retention'}``: the queue's defaults for the
    fields a task hash lacks, e.g. a task of a foreign producer, and its limits,
    ``'max_running'``, ``'max_running_per_key'`` and ``'rate_limit'``: admission.py),
    ``retention`` (default seconds to keep finished tasks, when no policy is given),
    ``duties`` (a callable run every
    ``duties_interval`` seconds in the listener, e.g. the scheduler and the reaper),
    ``before_fork()`` (run before each fork, e.g. to close database connections a child must
    not inherit) and ``on_task_end(task, outcome, value, error_type)`` (run in the task's
    process once its end is recorded; outcome is 'complete', 'failed', 'retry' or 'stale')
    and ``around_task(queue, task, listener_id)`` (a context manager each run goes on in, in
    the task's process, around the callback and the recording of its end: e.g. a span).
    The liveness timings are the client's (``Client(timings=...)``).
    """

    def __init__(self, client: Client, queue: str | Iterable[str],
                 task_callback: Callable[[Task], object], concurrency: int = 1, *,
                 burst: bool = False, max_tasks: int | None = None, kill_grace: float = 10.0,
                 policy: Policy | None = None, retention: float | None = None,
                 duties: Callable[[], object] | None = None, duties_interval: float = 5.0,
                 before_fork: Callable[[], object] | None = None,
                 on_task_end: Callable[[Task, str, Any, Any], object] | None = None,
                 around_task: Callable[[str, Task, str], AbstractContextManager[object]]
                 | None = None) -> None:
        self._client = client
        self._protocol = client.protocol
        self.timings = client.protocol.timings
        self.queues = [queue] if isinstance(queue, str) else list(queue)
        for name in self.queues:
            if not k.valid_name(name):
                raise ValueError(f"invalid queue name {name!r}")
        if not self.queues:
            raise ValueError("a runner needs at least one queue")
        if int(concurrency) < 1:
            raise ValueError(f"concurrency must be at least 1, not {concurrency}")
        self._callback = task_callback
        self.concurrency = int(concurrency)
        self.burst = burst
        self.max_tasks = max_tasks
        self.kill_grace = kill_grace
        self.policy = policy or (lambda queue: {"retention": retention})
        self._duties = duties
        self._duties_interval = duties_interval
        self._before_fork = before_fork
        self._on_task_end = on_task_end
        self._around_task = around_task
        self.listener_id = k.unique_listener_id(k.hostname(), os.getpid())
        self.tasks_taken = 0
        self.stopped_cleanly = True
        self._stops = 0
        self._admission = {name: Admission.of(self.policy(name)) for name in self.queues}
        self._lease = {name: self.timings.for_queue(self.policy(name)).lease
                       for name in self.queues}  # a queue may have a longer one (timings.py)
        self._heartbeat, self._processes = self._make_heartbeat_and_processes()
        self._listened = ListenedQueues(client, self.queues, self.timings.block)
        self._lost_takes = LostTakes(self._protocol, self.listener_id)
        self._outage = Outage(logger, "listener")
        self._wakeup = WakeupPipe()
        self._next_duties = 0.0

    @property
    def children(self) -> dict[int, Any]:
        """The task processes, by pid."""
        return self._processes.children

    def _make_heartbeat_and_processes(self) -> tuple[Heartbeat, TaskProcesses]:
        heartbeat = Heartbeat(self._protocol, self.listener_id, self.queues, self.concurrency,
                              self._lease)
        process = TaskProcess(self._protocol, self.listener_id, self._callback, self.policy,
                              on_task_end=self._on_task_end, beacon=heartbeat.beacon,
                              kill_grace=self.kill_grace, around_task=self._around_task)
        return heartbeat, TaskProcesses(self._protocol, self.listener_id, process, self.policy,
                                        self.kill_grace, self._before_fork, self._in_child)

    def _in_child(self) -> None:
        """In a new task process: what is the listener's is not its own."""
        self._wakeup.forget()
        self._processes.let_all_go()

    # -- the listener's loop -----------------------------------------------------------------

    def run(self) -> bool:
        """Listen until stopped (or drained in burst mode); returns True on a clean stop."""
        if k.parse_listener_id(self.listener_id)[1] != os.getpid():  # type: ignore[index]
            self.listener_id = k.unique_listener_id(k.hostname(), os.getpid())  # made before a fork
            self._heartbeat, self._processes = self._make_heartbeat_and_processes()
            self._lost_takes = LostTakes(self._protocol, self.listener_id)
        self._outage.who = f"listener {self.listener_id}"
        self._heartbeat.started_at = time.time()
        previous = self._wakeup.open({signal.SIGTERM: self._on_stop_signal,
                                      signal.SIGINT: self._on_stop_signal,
                                      signal.SIGCHLD: lambda *_: None})
        logger.info("listener %s started on %s with concurrency %d", self.listener_id,
                    ", ".join(self.queues), self.concurrency)
        froze = freeze_heap()
        try:
            self.claim_orphans()
            self._loop()
        finally:
            self._shutdown()
            self._wakeup.close(previous)
            if froze:
                gc.unfreeze()
        return self.stopped_cleanly

    def claim_orphans(self) -> None:
        """At start-up, as blueque 1.0's runner does: recover what dead listeners of this host
        left in its queues (those of other hosts are the reaper's)."""
        try:
            for queue in self.queues:
                requeued, recovered = recover_local_orphans(self._protocol, queue, self.listener_id,
                                                            self.policy(queue))
                if requeued or recovered:
                    logger.info("listener %s: %s: requeued %d task(s) and recovered %d of dead "
                                "listeners of this host", self.listener_id, queue, len(requeued),
                                len(recovered))
        except redis.RedisError as exc:
            logger.warning("listener %s: could not look for orphans (%s)", self.listener_id, exc)

    def stop(self) -> None:
        """Ask the loop to stop, as SIGTERM does (a second call stops at once)."""
        self._stops += 1
        self._wakeup.poke()

    def fork_task(self, task: Task) -> int:
        """blueque 1.0's: run a reserved task in a forked process, which records its start and
        its end through a Processor; returns the process's pid. (The runner's own loop forks a
        process before it takes a task, and hands the task over.)"""
        pid = os.fork()
        if pid == 0:
            run_with_processor(self._client, task, self._callback)
        return pid

    def _accepting(self) -> bool:
        return self._stops == 0 and (self.max_tasks is None or self.tasks_taken < self.max_tasks)

    def _can_take(self, current: float) -> bool:
        return (len(self._processes) < self.concurrency and self._accepting()
                and self._processes.can_fork(current))

    def _loop(self) -> None:
        while True:
            self._processes.collect()
            if self._stops >= 2:
                self.stopped_cleanly = not self._processes
                return
            if not self._accepting():
                self._listened.close()
                self._processes.spare.drop()
                self._heartbeat.stop_taking()
                if not self.children:
                    return
            try:
                self._processes.flush_backlog()
                current = time.monotonic()
                if current >= self._heartbeat.next_at:
                    self._beat(current)
                if self._duties and current >= self._next_duties:
                    self._run_duties(current)
                self._processes.enforce_deadlines(current)
                if deaf(self._armed_peeks(), current):
                    logger.warning("listener %s: a blocking peek went unanswered; reconnecting",
                                   self.listener_id)
                    self._listened.close()
                if self._lost_takes and current >= self._lost_takes.next_look:
                    self._lost_takes.settle(current)
                if self._accepting():
                    taken = self.tasks_taken
                    for queue in self._take_tasks(current):
                        self._listened.arm(queue)
                    if taken == self.tasks_taken and len(self._processes) < self.concurrency:
                        self._processes.spare.want(current)  # children.Spare says when
                if self.burst and self._drained():
                    logger.info("listener %s: queues drained, burst done", self.listener_id)
                    return
            except redis.RedisError as exc:
                self._listened.close()
                self._heartbeat.lost()
                self._wait(self._outage.failed(exc), [])
                continue
            self._outage.recovered()
            self._wait(self._next_wakeup() - time.monotonic(), self._armed_peeks())

    def _drained(self) -> bool:
        """Burst mode: nothing runs and every queue's peeks wait (polled once more, so that a
        task that came since is not left behind)."""
        if self._processes or not self._accepting():
            return False
        self._wait(0.0, self._armed_peeks())
        return self._listened.all_waiting()

    def _wait(self, timeout: float, peeks: list[Any]) -> None:
        """Until the timeout, a signal, a peek's reply, or a task process saying its task
        ended (its slot is then free, before its exit: channel.py). ``poll``, not
        ``select``: a listener of many queues or tasks holds descriptors past 1024."""
        waited: dict[int, Any] = {self._wakeup.fileno(): self._wakeup}
        for peek in peeks:
            with contextlib.suppress(OSError, ValueError):  # its socket went away: the next
                waited[peek.fileno()] = peek  # round reconnects
        channels = self._processes.channels()
        poller = select.poll()
        for fd in (*waited, *channels):
            poller.register(fd, select.POLLIN)
        for fd, _ in poller.poll(max(0.0, timeout) * 1000):
            if fd in channels:
                self._processes.heard_from(channels[fd])
            elif waited[fd] is self._wakeup:
                self._wakeup.drain()
            else:
                try:
                    waited[fd].settle()
                except redis.RedisError:
                    pass  # e.g. a peek refused while Redis loads: the next round tries again

    def _next_wakeup(self) -> float:
        times: list[float] = [self._heartbeat.next_at, self._processes.next_deadline(),
                              *self._listened.next_times()]
        if self._duties:
            times.append(self._next_duties)
        if self._processes.backlog or self._lost_takes:
            times.append(time.monotonic() + 1.0)
        if self._processes.forks_from > time.monotonic():
            times.append(self._processes.forks_from)
        return min(times)

    def _armed_peeks(self) -> list[Any]:
        """The peeks worth waiting on: none while every slot is busy (a task that comes then
        cannot be taken; its peek's reply waits in the socket until a slot frees)."""
        if len(self._processes) >= self.concurrency:
            return []
        return self._listened.armed_peeks()

    # -- taking tasks ------------------------------------------------------------------------

    def _take_tasks(self, current: float) -> list[str]:
        """Take while slots are free, one task per queue in turn; returns the queues found
        empty (their peeks are armed next)."""
        empty: list[str] = []
        queues = self._listened.to_look_at(current)
        while queues and self._can_take(current):
            for queue in list(queues):
                if not self._can_take(current):
                    break
                try:
                    more = self._take(queue, current)
                except redis.ResponseError as exc:
                    if is_transient(exc):
                        raise
                    queues.remove(queue)
                    self._set_aside(queue, str(exc), current)
                    continue
                if not more:
                    queues.remove(queue)
                    if more is not None:
                        empty.append(queue)
        return empty

    def _take(self, queue: str, current: float) -> bool | None:
        """Fork a task process (or use the spare), reserve the queue's next task and start it
        with that process's pid in one step, and hand it over. Returns whether more tasks may
        wait, or None when the queue's limits refused a start (it then waits for a slot, or for
        its window)."""
        child = self._processes.for_take()
        token, taken_at = new_token(), time.monotonic()
        try:
            taken = self._protocol.take(queue, self.listener_id, token, child.pid,
                                        self._admission[queue], self._lease[queue])
        except BaseException as exc:
            if isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):  # it may have
                self._lost_takes.add(token, queue, current, child.pid)  # gone through
            self._processes.let_go(child)
            raise
        if taken is None or taken[1] in ("full", "rate", "skipped", "held"):
            self._processes.let_go(child)  # nothing for it to run
        if taken is None:
            return False
        task_id, outcome, reply, more = taken
        if outcome == "full":
            self._listened.wait_for_slot(queue)
            return None
        if outcome == "rate":
            self._listened.wait_for_rate(queue, current + float(cast(float, reply)))
            return None
        if outcome == "skipped":
            logger.warning("queue %s: dropped id %s: %s", queue, printable(task_id), reply)
        if outcome in ("skipped", "held"):
            return True
        self.tasks_taken += 1
        self._heartbeat.task_started(current)
        self._processes.hand_over(child, queue, token, task_id, outcome, reply, taken_at, more)
        if outcome == "unstarted":
            raise redis.ResponseError(reply)  # the queue is set aside
        return more

    def _set_aside(self, queue: str, why: str, current: float) -> None:
        """Leave a queue whose keys hold garbage alone for a while: the others go on."""
        if self._listened.set_aside(queue, current + SET_ASIDE_SECONDS):
            logger.error("listener %s: queue %s set aside for %g s: %s", self.listener_id,
                         queue, SET_ASIDE_SECONDS, why)

    # -- liveness ------------------------------------------------------------------------------

    def _beat(self, current: float) -> None:
        """Beat (heartbeat.py): a long heartbeat while idle; then stop the tasks whose
        cancellation is asked, and set aside the queues whose listener keys are garbage."""
        busy = bool(self._processes or self._processes.backlog or self._lost_takes)
        cancels, skipped = self._heartbeat.beat(current, self._processes.running(), busy)
        for queue in skipped:
            self._set_aside(queue, "its listeners or listener-leases key holds the wrong type",
                            current)
        self._processes.cancel(cancels, current)

    def _run_duties(self, current: float) -> None:
        self._next_duties = current + self._duties_interval
        assert self._duties is not None  # _loop calls this only when there are duties
        try:
            self._duties()
        except redis.RedisError:
            raise
        except Exception:
            logger.exception("listener %s: scheduler/reaper duties failed", self.listener_id)

    # -- stopping -----------------------------------------------------------------------------

    def _on_stop_signal(self, signum: int, frame: FrameType | None) -> None:
        self._stops += 1
        if self._stops == 1:
            logger.info("listener %s: %s received, finishing %d running task(s); send it "
                        "again to stop at once", self.listener_id, signal.Signals(signum).name,
                        len(self._processes))
        else:
            logger.warning("listener %s: stopping at once; running tasks continue in their own "
                           "processes", self.listener_id)

    def _shutdown(self) -> None:
        self._listened.close()
        self._processes.let_all_go()
        try:
            if self._lost_takes:
                self._lost_takes.settle(time.monotonic())
            for queue in self.queues:
                released = self._protocol.release_listener(self.listener_id, queue, own=True)
                if released and released[0]:
                    logger.info("listener %s: requeued %d unstarted task(s) of %s",
                                self.listener_id, len(released[0]), queue)
            self._protocol.forget_listener(self.listener_id, self.queues)
        except redis.RedisError as exc:
            self.stopped_cleanly = False
            logger.warning("listener %s: could not unregister (%s); the reaper will release it",
                           self.listener_id, exc)
        logger.info("listener %s stopped%s", self.listener_id,
                    "" if self.stopped_cleanly else " (not cleanly)")
