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
CUT_OFF_EXIT (not sooner: Redis itself stopped for everyone looks the same from here, and
then nobody recovers anything). Silence is counted from when the last confirmed renewal was
*sent* (Redis set the lease's expiry no sooner). Time during which Redis answered, even with
a refusal (LOADING, a refused connection: Redis restarting, which stops the reaper too),
counts as heard from.
"""

from __future__ import annotations

import logging
import mmap
import os
import signal
import struct
import threading
import time
from typing import TYPE_CHECKING, cast

import redis

from . import keys as k
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
                 timings: Timings = DEFAULT, kill_grace: float = 10.0,
                 renewed_at: float | None = None) -> None:
        super().__init__(name="blueque-lease", daemon=True)
        self.running = running
        self.parents = parents
        self.own_process = own_process
        self.beacon = beacon
        self.timings = timings
        self.kill_grace = kill_grace
        self.began = time.monotonic()
        # when the last confirmed renewal was sent, or Redis heard refusing (monotonic);
        # ``renewed_at``: when the lease was set (its take), if known
        self.heard = self.began if renewed_at is None else renewed_at
        self.cancelled_at: float | None = None  # when its renewal brought a cancellation

    def run(self) -> None:
        try:
            self._keep()
        except BaseException:
            logger.exception("task %s: the lease thread failed", self.running.id)

    def _keep(self) -> None:
        running, timings = self.running, self.timings
        if running.finished.wait(CONNECT_AFTER):
            return
        if self.own_process:
            threading.Thread(target=self._watch, name="blueque-cut-off", daemon=True).start()
        self._connect()
        outage = Outage(logger, f"task {running.id}: lease", first_pause=timings.retry)
        pause = timings.renew_every
        while not running.finished.wait(pause):
            sent = time.monotonic()
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
                self.heard, pause = max(self.heard, sent), timings.renew_every
            if not held:
                if not running.ending.is_set():  # else: the end's next try says what it became
                    self._lost()
                return
            orphan = self.own_process and os.getppid() not in self.parents
            if cancel and not running.cancel_requested.is_set():
                running.cancel_requested.set()
                self.cancelled_at = time.monotonic()
                if orphan:  # no listener will stop it: stop itself
                    os.kill(os.getpid(), signal.SIGTERM)
            if orphan:
                self._enforce_timeout()
                self._enforce_cancel()

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
        logger.error("task %s: lease lost: %s%s", running.id, self._why_lost(),
                     "; stopping this process" if self.own_process else "")
        if self.own_process:
            if os.getpgrp() == os.getpid():
                os.killpg(os.getpid(), signal.SIGKILL)  # its subprocesses too
            os.kill(os.getpid(), signal.SIGKILL)

    def _why_lost(self) -> str:
        """What became of the task, as Redis says (one read, on the rare loss of a lease)."""
        try:
            status, error_type, node = cast("list[str | None]", self.running.protocol.redis.hmget(
                self.running.protocol.keys.task(self.running.id), "status", "error_type", "node"))
        except redis.RedisError:
            return "the task is no longer this run's"
        if status is None:
            return "the task is gone from Redis (deleted, or Redis lost its data)"
        if status in k.FINISHED:
            return f"the task was ended elsewhere: {status}" + (
                f" ({error_type})" if error_type else "")
        if status in (k.RESERVED, k.STARTED):
            return f"the task was recovered and runs again, on {node}"
        return f"the task was recovered and is {status}, waiting for another run"

    def silence(self) -> float:
        """Seconds since anyone last confirmed the lease: this process, or its listener (the
        beacon: its last renewal of all its children's leases)."""
        last = self.heard if self.beacon is None else max(self.heard, self.beacon.last())
        return time.monotonic() - last

    def _watch(self) -> None:
        """Nobody confirmed the lease for cut_off seconds: should_stop() turns true; kill_grace
        seconds more: the process ends, unless its code is done (its end is being recorded:
        nothing to stop, and its result is kept). A thread of its own, so that a renewal
        waiting for its socket's timeout does not make it late."""
        running, cut_off = self.running, self.timings.cut_off
        ends_at = cut_off + self.kill_grace
        while True:
            silent = self.silence()
            if silent >= ends_at:
                break
            if silent >= cut_off and not running.cut_off.is_set():
                running.cut_off.set()
                logger.error("task %s: nobody could renew its lease for %.0f s (this process "
                             "and its listener cannot reach Redis): stopping the task, the "
                             "reaper may give it to another process", running.id, silent)
            if running.ending.wait((cut_off if silent < cut_off else ends_at) - silent):
                return
        logger.error("task %s: ending its process, cut off from Redis for %.0f s", running.id,
                     silent)
        logging.shutdown()
        os._exit(CUT_OFF_EXIT)

    def _enforce_cancel(self) -> None:
        """With its listener gone, a cancelled task whose code watches should_stop() (told by
        SIGTERM, not interrupted) but does not end within kill_grace is killed, as its
        listener would have done."""
        if (self.cancelled_at is not None and not self.running.ending.is_set()
                and time.monotonic() >= self.cancelled_at + self.kill_grace):
            logger.warning("task %s: still running %g s after its cancellation, with its "
                           "listener gone; killing it", self.running.id, self.kill_grace)
            os.killpg(os.getpid(), signal.SIGKILL)

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
