"""A running task's lease: where it is kept, and what losing it means.

The lease is a key (``blueque_lease_<id>``) holding the reservation's token with an expiry on
Redis's clock. The task's own process renews it from a thread, every third of its length, so a
task keeps running, and records its own end, whatever happens to its listener. A process that
cannot reach Redis keeps trying (once a second) and takes a lapsed lease back as soon as Redis
answers, unless the reaper recovered the task meanwhile: that, and only that, is a lost lease,
and the process then stops at once so the task is never run to its end twice.

The reaper recovers a task only after it has seen its lease lapsed for a while (see
maintenance.Reaper), longer than this keeper needs to renew once Redis is back.
"""

from __future__ import annotations

import _thread
import logging
import os
import signal
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import redis

from .outages import Outage
from .protocol import LEASE_TTL

if TYPE_CHECKING:
    from .context import RunningTask

logger = logging.getLogger("django_blueque.task")

RENEW_EVERY = LEASE_TTL / 3
RETRY_EVERY = 1.0
"""Seconds between renewal attempts while Redis does not answer."""


class LeaseKeeper:
    """The thread that renews one task's lease. The forking runner starts it in its spare
    process before a task is known (a thread's first start costs most); ``keep()`` then says
    which task it keeps. ``begun()`` is called first, from the thread: once the task's code
    runs (the thread waits for the interpreter's lock), unless the task's end is recorded by
    then; given ahead, as the lambda that says it costs a process just forked two
    copy-on-write faults. A bare thread (``_thread``), not a ``threading.Thread``, whose
    bookkeeping, run once in each process forked for a task, cost that process 0.24 ms and 96
    copy-on-write faults against 0.10 ms and 38 (bench/README.md)."""

    def __init__(self, begun: Callable[[], object] | None = None) -> None:
        self._given = _thread.allocate_lock()  # released once keep() gave it a task
        self._given.acquire()
        self._alive = _thread.allocate_lock()  # held while the thread runs
        self._started = False
        self._job: tuple[RunningTask, tuple[int, ...], bool, float] | None = None
        self._begun = begun

    def start(self) -> None:
        self._alive.acquire()
        self._started = True
        _thread.start_new_thread(self._main, ())

    def is_alive(self) -> bool:
        return self._alive.locked()

    def join(self, timeout: float | None = None) -> None:
        if self._started and self._alive.acquire(timeout=-1 if timeout is None else timeout):
            self._alive.release()

    def _main(self) -> None:
        try:
            self.run()
        except BaseException:
            logger.exception("the lease thread failed")
        finally:
            self._alive.release()

    def keep(self, running: RunningTask, parents: tuple[int, ...], own_process: bool) -> None:
        """Renew ``running``'s lease until ``running.finished`` is set. ``own_process``: this
        process exists for the task alone (a forking runner's child), so it may stop itself
        when the lease is lost, and enforce the task's timeout once its parent is none of
        ``parents`` (its listener, and the fork server that forked it); otherwise losing the
        lease only makes ``should_stop()`` true."""
        self._job = (running, parents, own_process, time.monotonic())
        self._given.release()
        if not self._started:
            self.start()

    def run(self) -> None:
        self._given.acquire()
        assert self._job is not None  # keep() gave it before the release
        running, parents, own_process, began = self._job
        if self._begun is not None:
            with running.recording:
                if not running.finished.is_set():
                    self._begun()
        outage = Outage(logger, f"task {running.id}: lease", first_pause=RETRY_EVERY)
        pause = RENEW_EVERY
        while not running.finished.wait(pause):
            with running.recording:  # never renew across the recording of the task's end
                if running.finished.is_set():
                    return
                try:
                    held, cancel = running.protocol.renew_lease(running.id, running.token)
                except redis.RedisError as exc:
                    outage.failed(exc)
                    held, cancel, pause = True, False, RETRY_EVERY
                else:
                    outage.recovered()
                    pause = RENEW_EVERY
            if not held:
                self._lost(running, own_process)
                return
            orphan = own_process and os.getppid() not in parents
            if cancel and not running.cancel_requested.is_set():
                running.cancel_requested.set()
                if orphan:  # no listener will stop it: stop itself
                    os.kill(os.getpid(), signal.SIGTERM)
            if orphan:
                self._enforce_timeout(running, began)

    @staticmethod
    def _lost(running, own_process):
        running.lease_lost.set()
        logger.error("task %s: lease lost (the task was recovered elsewhere)%s", running.id,
                     "; stopping this process" if own_process else "")
        if own_process:
            if os.getpgrp() == os.getpid():
                os.killpg(os.getpid(), signal.SIGKILL)  # its subprocesses too
            os.kill(os.getpid(), signal.SIGKILL)

    @staticmethod
    def _enforce_timeout(running, began):
        """With its listener gone, nobody else stops a task past its timeout, and its lease,
        renewed here, would keep it running for ever: SIGTERM itself (recorded as timed out),
        then SIGKILL a renewal later if it is still there. Measured on this process's
        monotonic clock: another host's clock says nothing here."""
        if not running.timeout or time.monotonic() < began + running.timeout:
            return
        if not running.timed_out.is_set():
            running.timed_out.set()
            logger.warning("task %s: timed out after %g s with its listener gone; stopping",
                           running.id, running.timeout)
            os.kill(os.getpid(), signal.SIGTERM)
        else:
            os.killpg(os.getpid(), signal.SIGKILL)
