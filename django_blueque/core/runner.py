"""The forking runner: a listener that runs up to N tasks at a time, one forked process each.

One thread, one ``select()``: the listener waits at once on two blocking peeks per queue
(``BLMOVE pending pending RIGHT RIGHT``, which returns as soon as the list has an id and leaves
it as it was; the same on the list that holds an element while tasks with a priority wait), on
its children's exits and on signals (both through a wake-up pipe), and on the next timer
(heartbeat, timeouts, kill escalations). So it sends nothing while idle but its
heartbeat, starts a task within milliseconds of its enqueue, and notices a child's death at once.
The task itself is then reserved and started, in one atomic script (``take``), with the pid of
a task process forked ahead, while the listener was idle or its tasks ran, and handed to that
process through a socket (a fork costs milliseconds; it is kept off the way from enqueue to the
task's code, and from one task's end to the next one's start). The listener waits on those
sockets too: a process sends its task's end there, and the listener records it (channel.py).

A task's process renews its own lease from a thread, so it keeps running, and records its own
end when its listener does not answer, even if its listener dies; it kills itself if it ever
loses the lease (the reaper handed its task to someone else). The listener records the end of
a child that died without reporting, guarded by the reservation token so a result already
recorded is never overwritten.

Stopping: the first SIGTERM or SIGINT makes the listener take no new task and wait for its
running tasks to end (waiting is the one way that never repeats hours of work). A second one
stops at once: tasks it reserved but had not started go back to the queue, and running ones are
left to finish in their own processes, which hold their own leases and record their own results;
if they die, the reaper recovers their tasks after their lease expires.

Where the rest lives: the blocking peek in waiter.py, the take sent behind it in
take_ahead.py, where spare task processes come from in spares.py (the fork server that
forks them in fork_server.py), the task processes (hand-over, deadlines, recording a death) in
children.py, the socket between the listener and each of them in channel.py, what runs inside
one in task_process.py, its lease in lease.py, and the wake-up pipe in wakeup.py.
"""

from __future__ import annotations

import gc
import logging
import os
import select
import signal
import time
from collections.abc import Callable, Iterable
from types import FrameType
from typing import TYPE_CHECKING, Any

import redis

from . import keys as k
from .children import TaskProcesses
from .orphans import recover_local_orphans
from .outages import Outage
from .protocol import HEARTBEAT_TTL, IDLE_HEARTBEAT_TTL
from .spares import Spares
from .take_ahead import TakesAhead
from .waiter import PendingWaiter, deaf
from .wakeup import WakeupPipe

if TYPE_CHECKING:
    from .client import Client
    from .maintenance import Policy
    from .task import Task

logger = logging.getLogger("django_blueque.listener")

QUARANTINE_SECONDS = 10.0
"""How long a queue whose keys hold data of the wrong type is left alone before another try."""


def _freeze_heap() -> bool:
    """Move every object the listener holds out of the garbage collector's reach (gc.freeze),
    once, before its first fork: a task process's full collection would otherwise copy every
    page of the listener's heap (~10 MiB and ~20 ms for a bare listener, ~21 MiB and ~37 ms
    under a small Django project). Returns whether nothing was frozen before: run() then
    unfreezes on return (else the program that embeds it froze objects of its own)."""
    first = not gc.get_freeze_count()
    gc.collect()
    gc.freeze()
    return first


class ForkingRunner(TaskProcesses, Spares, TakesAhead):
    """blueque 1.0's ``ForkingRunner(client, queue, callback).run()``, extended.

    ``queue`` may be a list of queues. ``callback(task)`` runs in a forked process and returns
    the result (a string, or anything JSON can encode). Keyword options: ``concurrency`` (tasks
    at once), ``burst`` (return once the queues are empty and nothing runs), ``max_tasks``,
    ``kill_grace`` (seconds between SIGTERM and SIGKILL when stopping a task), ``policy``
    (``queue -> {'retries', 'backoff', 'timeout', 'retention'}``: the queue's defaults for the
    fields a task hash lacks, e.g. a task of a foreign producer), ``retention`` (default
    seconds to keep finished tasks, when no policy is given), ``duties`` (a callable run every
    ``duties_interval`` seconds in the listener, e.g. the scheduler and the reaper),
    ``before_fork()`` (run before each fork, e.g. to close database connections a child must
    not inherit), ``on_task_end(task, outcome, value, error_type)`` (run in the task's process
    once its end is recorded; outcome is 'complete', 'failed', 'retry' or 'stale') and
    ``fork_server`` (False: the listener forks its task processes itself, as it does where the
    fork server cannot run; see fork_server.py).
    """

    _started_at: float

    def __init__(self, client: Client, queue: str | Iterable[str],
                 task_callback: Callable[[Task], object], concurrency: int = 1, *,
                 burst: bool = False, max_tasks: int | None = None, kill_grace: float = 10.0,
                 policy: Policy | None = None, retention: float | None = None,
                 duties: Callable[[], object] | None = None, duties_interval: float = 5.0,
                 heartbeat_interval: float = HEARTBEAT_TTL / 3,
                 before_fork: Callable[[], object] | None = None,
                 on_task_end: Callable[[Task, str, Any, Any], object] | None = None,
                 fork_server: bool = True) -> None:
        self._client = client
        self._protocol = client.protocol
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
        self._heartbeat_interval = heartbeat_interval
        self._before_fork = before_fork
        self._on_task_end = on_task_end
        self.fork_server = fork_server
        self._server = None  # the fork server's handle, while one runs (spares.py)
        self._server_started = None  # when the last one started (monotonic)
        self.listener_id = k.unique_listener_id(k.hostname(), os.getpid())
        self.children = {}
        self.tasks_taken = 0
        self.stopped_cleanly = True
        self._stops = 0
        self._backlog = []
        self._waiters: dict[str, PendingWaiter] = {}
        # queue -> monotonic time it may be tried again (bad data)
        self._quarantine: dict[str, float] = {}
        # token of a take whose reply was lost -> (queue, monotonic time it was sent, pid)
        self._unsure: dict[str, tuple[str, float, int]] = {}
        self._next_settle = 0.0
        self._outage = Outage(logger, "listener")
        self._wakeup = WakeupPipe()
        self._next_beat = self._next_duties = 0.0
        self._sent_info: dict[str, object] | None = None
        self._lease = 0.0  # the ttl of the last heartbeat
        self._spare = None  # (pid, socket) of a task process forked ahead, waiting for a task
        self._handover = None  # the task last handed over, until its code starts
        self._ahead = None  # the take sent behind the pending peek (take_ahead.py)
        self._rotation = 0

    # -- the listener's loop -----------------------------------------------------------------

    def run(self) -> bool:
        """Listen until stopped (or drained in burst mode); returns True on a clean stop."""
        # made before a fork? (our own ids always parse: unique_listener_id)
        if k.parse_listener_id(self.listener_id)[1] != os.getpid():  # type: ignore[index]
            self.listener_id = k.unique_listener_id(k.hostname(), os.getpid())
        self._outage.who = f"listener {self.listener_id}"
        self._started_at = time.time()
        self._waiters = {queue: PendingWaiter(self._client, queue) for queue in self.queues}
        previous = self._wakeup.open({signal.SIGTERM: self._on_stop_signal,
                                      signal.SIGINT: self._on_stop_signal,
                                      signal.SIGCHLD: lambda *_: None})
        logger.info("listener %s started on %s with concurrency %d", self.listener_id,
                    ", ".join(self.queues), self.concurrency)
        froze = _freeze_heap()
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
                requeued, recovered = recover_local_orphans(self._client, queue, self.listener_id,
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

    def _accepting(self) -> bool:
        return self._stops == 0 and (self.max_tasks is None or self.tasks_taken < self.max_tasks)

    def _busy_slots(self) -> int:
        """The task processes that hold a slot: all but those on their way out."""
        return sum(not child.exiting for child in self.children.values())

    def _can_take(self) -> bool:
        """A slot is free, and no task handed over is still on its way to its code."""
        free = self._busy_slots() < self.concurrency and self._accepting()
        return free and not self._handing()

    def _loop(self) -> None:
        while True:
            self._collect_children()
            if self._stops >= 2:
                self.stopped_cleanly = not self.children
                return
            if not self._accepting():
                self._close_waiters()
                self._drop_spare()
                if not self.children:
                    return
            try:
                self._flush_backlog()
                current = time.monotonic()
                if current >= self._next_beat:
                    self._beat(current)
                if self._duties and current >= self._next_duties:
                    self._run_duties(current)
                self._enforce_deadlines(current)
                if deaf(self._armed_peeks(), current):
                    logger.warning("listener %s: a blocking peek went unanswered; reconnecting",
                                   self.listener_id)
                    self._close_waiters(unblock=False)
                if self._unsure and current >= self._next_settle:
                    self._settle_unsure(current)
                empty = self._take_tasks() if self._accepting() else []
                if (self.burst and not self.children and self._accepting()
                        and all(q in empty or self._waiters[q].armed or q in self._quarantine
                                for q in self.queues)):
                    logger.info("listener %s: queues drained, burst done", self.listener_id)
                    return
                if empty:
                    self._keep_spare()  # the take sent ahead names it (take_ahead.py)
                for queue in empty:
                    self._arm(queue)
            except redis.RedisError as exc:
                self._close_waiters(unblock=False)
                self._next_beat = 0.0  # re-register as soon as Redis answers again
                self._wait(self._outage.failed(exc), [])
                continue
            self._outage.recovered()
            self._keep_spare()
            self._handing()  # a handover that began or expired stops counting
            self._wait(self._next_wakeup() - time.monotonic(),
                       self._armed_peeks() + self._channels())

    def _wait(self, timeout: float, waiters: list[Any]) -> None:
        try:
            server = [self._server] if self._server and not self._server.gone else []
            readable, _, _ = select.select([self._wakeup, *server, *waiters], [], [],
                                           max(0.0, timeout))
        except (OSError, ValueError):
            readable = []  # a waiter's socket went away; the next round reconnects
        self._rouse_spare(readable)
        for ready in readable:
            if ready is self._wakeup:
                self._wakeup.drain()
            else:
                try:
                    ready.settle()
                except redis.RedisError:
                    pass  # e.g. a peek refused while Redis loads: the next round tries again

    def _next_wakeup(self) -> float:
        times = [self._next_beat]
        if self._duties:
            times.append(self._next_duties)
        if self._backlog:
            times.append(time.monotonic() + 1.0)
        if self._handover:
            times.append(self._handover[1])
        if self._server is not None:
            times.append(self._server_due(time.monotonic()))
        times += self._quarantine.values()
        times += [peek.due for peek in self._armed_peeks()]
        for child in self.children.values():
            if child.deadline and not child.stop_reason:
                times.append(child.deadline)
            if child.kill_at:
                times.append(child.kill_at)
        return min(times)

    def _armed_peeks(self) -> list[Any]:
        """The peeks worth waiting on: none while every slot is busy (a task that comes then
        cannot be taken; its peek's reply waits in the socket until a slot frees)."""
        if self._busy_slots() >= self.concurrency:
            return []
        return [peek for waiter in self._waiters.values() for peek in waiter.peeks if peek.armed]

    def _close_waiters(self, unblock: bool = True) -> None:
        """Close the peeks, withdrawing the take sent ahead (by CLIENT UNBLOCK, unless Redis
        just failed)."""
        self._withdraw_ahead(time.monotonic(), unblock)
        for waiter in self._waiters.values():
            waiter.close()

    # -- liveness ------------------------------------------------------------------------------

    def _beat(self, current: float) -> None:
        """Renew the lease (a long one while idle: see IDLE_HEARTBEAT_TTL); write the info hash
        when it changed or after a (re-)registration, and collect cancellations while tasks
        run."""
        busy = bool(self.children or self._backlog or self._unsure)
        ttl = HEARTBEAT_TTL if busy else IDLE_HEARTBEAT_TTL
        info: dict[str, object] = {
            "host": k.hostname(), "pid": os.getpid(), "queues": ",".join(self.queues),
            "concurrency": self.concurrency, "running": self._busy_slots(),
            "since": repr(self._started_at), "lease": ttl}
        changed = info if info != self._sent_info else None
        registered, cancels, skipped = self._protocol.heartbeat(
            self.listener_id, self.queues, changed, collect_cancels=bool(self.children),
            ttl=ttl)
        if registered and changed is None:
            self._protocol.heartbeat(self.listener_id, self.queues, info, collect_cancels=False,
                                     ttl=ttl)
        self._sent_info, self._lease = info, ttl
        self._next_beat = current + self._heartbeat_interval * ttl / HEARTBEAT_TTL
        for queue in skipped:
            self._set_aside(queue, "its listeners or listener-leases key holds the wrong type",
                            current)
        for task_id in cancels:
            for child in self.children.values():
                if child.task_id == task_id and not child.stop_reason:
                    logger.info("task %s: cancellation requested, stopping pid %d", task_id,
                                child.pid)
                    self._stop_child(child, "cancelled", current)

    def _run_duties(self, current: float) -> None:
        self._next_duties = current + self._duties_interval
        assert self._duties is not None  # _loop calls this only when there are duties
        try:
            self._duties()
        except redis.RedisError:
            raise
        except Exception:
            logger.exception("listener %s: scheduler/reaper duties failed", self.listener_id)

    def _set_aside(self, queue: str, why: str, current: float) -> None:
        """Leave a queue whose keys hold garbage alone for a while: the others go on."""
        if queue not in self._quarantine:
            logger.error("listener %s: queue %s set aside for %g s: %s", self.listener_id,
                         queue, QUARANTINE_SECONDS, why)
        self._quarantine[queue] = current + QUARANTINE_SECONDS
        self._withdraw_ahead(current)
        self._waiters[queue].close()

    # -- stopping -----------------------------------------------------------------------------

    def _on_stop_signal(self, signum: int, frame: FrameType | None) -> None:
        self._stops += 1
        if self._stops == 1:
            logger.info("listener %s: %s received, finishing %d running task(s); send it "
                        "again to stop at once", self.listener_id, signal.Signals(signum).name,
                        len(self.children))
        else:
            logger.warning("listener %s: stopping at once; running tasks continue in their own "
                           "processes", self.listener_id)

    def _shutdown(self) -> None:
        self._close_waiters()
        self._stop_server()  # then the spare is the listener's to reap
        self._drop_spare()
        self._close_channels()  # tasks still running (a stop at once) record their own ends
        try:
            if self._unsure:  # e.g. a take sent ahead whose reply was lost
                self._settle_unsure(time.monotonic())
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
