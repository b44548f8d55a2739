"""A running task's lease: who renews it, and what losing it means.

The lease is a key (``blueque_lease_<id>``) holding the reservation's token with an expiry on
Redis's clock. Two renew it:

* the task's **listener**, at each heartbeat, for every task process it knows is alive (it is
  their parent: ``waitpid`` says when one ends). Whatever the task's code does to its own
  process (holds the GIL in a C call, is stopped, swapped out or starved of CPU), its lease is
  kept while its listener lives. The listener then writes the time into a ``Beacon`` it shares
  with its task processes;
* a thread of the task's **own process** (``LeaseKeeper``), every third of the lease, so the
  task outlives its listener and records its own end if its listener dies.

A lease lapses only when both are gone (or cut off from Redis). The reaper recovers a task
only after it has seen its lease lapsed for ``Timings.confirm`` seconds.

Losing it: when Redis says the token is no longer the lease's (the reaper recovered the task),
the process stops at once, so a run is never completed twice. When nobody could confirm the
lease for ``Timings.cut_off`` seconds (this process and its listener both cut off from Redis,
or the listener gone and this process cut off), the reaper may be recovering the task: the
keeper makes ``should_stop()`` true, and ends the process ``kill_grace`` seconds later with
CUT_OFF_EXIT. Time during which Redis answered, even with a refusal (LOADING, a refused
connection: Redis restarting, which stops the reaper too), counts as heard from.
"""

from __future__ import annotations

import logging
import mmap
import os
import signal
import struct
import threading
import time
from typing import TYPE_CHECKING

import redis

from .outages import Outage
from .timings import DEFAULT, Timings

if TYPE_CHECKING:
    from .context import RunningTask

logger = logging.getLogger("django_blueque.task")

CUT_OFF_EXIT = 75
"""A task process's exit status when it ended itself, cut off from Redis (EX_TEMPFAIL)."""

CONNECT_AFTER = 0.02
"""Seconds the lease thread waits before it connects: made at once, its connection would hold
the GIL while the task's code starts (``start()`` returns only once the thread runs)."""

_STAMP = struct.Struct("d")


class Beacon:
    """A monotonic time shared by a listener with the task processes it forks (an anonymous
    shared mapping, made before the first fork): when the listener last renewed all their
    leases. CLOCK_MONOTONIC is the same for every process of a host."""

    def __init__(self) -> None:
        self._map = mmap.mmap(-1, _STAMP.size)

    def confirm(self, when: float) -> None:
        _STAMP.pack_into(self._map, 0, when)

    def last(self) -> float:
        return float(_STAMP.unpack_from(self._map, 0)[0])


def heard_from(exc: BaseException) -> bool:
    """Whether a failed command still shows Redis there, serving nobody: a refused connection,
    or a server that is loading its data. The reaper cannot act then either."""
    cause = exc.__cause__ or exc.__context__
    return (isinstance(cause, ConnectionRefusedError) or "Connection refused" in str(exc)
            or str(exc).startswith("LOADING") or isinstance(exc, redis.BusyLoadingError))


class LeaseKeeper(threading.Thread):
    """The thread that renews one task's lease until ``running.finished`` is set.

    ``own_process``: this process exists for the task alone (a forking runner's child), so it
    may end itself when the lease is lost or cut off, and enforce the task's timeout and
    cancellation once its parent is none of ``parents`` (its listener died). Otherwise (a
    blueque 1.0 Processor) losing the lease only makes ``should_stop()`` true."""

    def __init__(self, running: RunningTask, *, parents: tuple[int, ...] = (),
                 own_process: bool = False, beacon: Beacon | None = None,
                 timings: Timings = DEFAULT, kill_grace: float = 10.0) -> None:
        super().__init__(name="blueque-lease", daemon=True)
        self.running = running
        self.parents = parents
        self.own_process = own_process
        self.beacon = beacon
        self.timings = timings
        self.kill_grace = kill_grace
        self.began = time.monotonic()
        self.heard = self.began  # the last time the lease was confirmed (or Redis heard)

    def run(self) -> None:
        try:
            self._keep()
        except BaseException:
            logger.exception("task %s: the lease thread failed", self.running.id)

    def _keep(self) -> None:
        running, timings = self.running, self.timings
        if running.finished.wait(CONNECT_AFTER):
            return
        self._connect()
        outage = Outage(logger, f"task {running.id}: lease", first_pause=timings.retry)
        pause = timings.renew_every
        while not running.finished.wait(pause):
            try:
                held, cancel = running.protocol.renew_lease(running.id, running.token,
                                                            timings.lease)
            except redis.RedisError as exc:
                outage.failed(exc)
                held, cancel, pause = True, False, timings.retry
                if heard_from(exc):
                    self.heard = time.monotonic()
            else:
                outage.recovered()
                self.heard, pause = time.monotonic(), timings.renew_every
            if not held:
                if not running.ending.is_set():  # else: the end's next try says what it became
                    self._lost()
                return
            orphan = self.own_process and os.getppid() not in self.parents
            if cancel and not running.cancel_requested.is_set():
                running.cancel_requested.set()
                if orphan:  # no listener will stop it: stop itself
                    os.kill(os.getpid(), signal.SIGTERM)
            if orphan:
                self._enforce_timeout()
            elif self.beacon is not None:
                self.heard = max(self.heard, self.beacon.last())
            if self.own_process and self._cut_off():
                return

    def _connect(self) -> None:
        """Connect while the task's code runs (a forked process inherits no connection), so
        that recording its end does not wait for one."""
        try:
            self.running.protocol.redis.ping()
        except redis.RedisError:
            pass  # the renewals report an outage, with their own retries

    def _lost(self) -> None:
        running = self.running
        running.lease_lost.set()
        logger.error("task %s: lease lost (the task was recovered elsewhere)%s", running.id,
                     "; stopping this process" if self.own_process else "")
        if self.own_process:
            if os.getpgrp() == os.getpid():
                os.killpg(os.getpid(), signal.SIGKILL)  # its subprocesses too
            os.kill(os.getpid(), signal.SIGKILL)

    def _cut_off(self) -> bool:
        """Nobody confirmed the lease for cut_off seconds: should_stop() turns true, and the
        process ends kill_grace seconds later unless its end is recorded meanwhile."""
        silent = time.monotonic() - self.heard
        running = self.running
        if silent < self.timings.cut_off or running.ending.is_set():
            return False  # (its code is done: nothing to stop, and its result is kept)
        if not running.cut_off.is_set():
            running.cut_off.set()
            logger.error("task %s: nobody could renew its lease for %.0f s (this process and "
                         "its listener cannot reach Redis): stopping the task, the reaper may "
                         "give it to another process", running.id, silent)
        if silent < self.timings.cut_off + self.kill_grace:
            return False
        if running.finished.is_set():
            return True
        logger.error("task %s: ending its process, cut off from Redis for %.0f s", running.id,
                     silent)
        logging.shutdown()
        os._exit(CUT_OFF_EXIT)

    def _enforce_timeout(self) -> None:
        """With its listener gone, nobody else stops a task past its timeout, and its lease,
        renewed here, would keep it running for ever: SIGTERM itself (recorded as timed out),
        then SIGKILL a renewal later if it is still there. Measured on this process's
        monotonic clock: another host's clock says nothing here."""
        running = self.running
        if not running.timeout or time.monotonic() < self.began + running.timeout:
            return
        if not running.timed_out.is_set():
            running.timed_out.set()
            logger.warning("task %s: timed out after %g s with its listener gone; stopping",
                           running.id, running.timeout)
            os.kill(os.getpid(), signal.SIGTERM)
        else:
            os.killpg(os.getpid(), signal.SIGKILL)
