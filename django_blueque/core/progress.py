"""Progress reports that never fail a task: a report Redis cannot take now is kept (the newest
only) and delivered from a daemon thread once Redis answers, with one log line when Redis goes
away and one when it answers again. Progress is best-effort; the task's work is not."""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

import redis

from .outages import Outage, is_transient

if TYPE_CHECKING:
    from .protocol import Protocol

logger = logging.getLogger("django_blueque.task")


class ProgressReports:
    """The reports of this process's task (a process runs one task at a time)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards _pending and _retrying
        # the newest report not yet delivered
        self._pending: tuple[Protocol, str, str, float, str] | None = None
        self._retrying = False  # a thread delivers _pending: the task's thread leaves it to it
        self._outage = Outage(logger, "progress report")

    def report(self, protocol: Protocol, task_id: str, token: str, percent: float,
               message: str) -> bool | None:
        """Deliver a report, or keep it for later. True if recorded, False if the task no
        longer holds its lease, None if Redis could not take it now."""
        with self._lock:
            self._pending = (protocol, task_id, token, percent, message)
            if self._retrying:
                return None
        return self._send()

    def _send(self) -> bool | None:
        with self._lock:
            pending, self._pending = self._pending, None
        if pending is None:
            return None
        protocol, task_id, token, percent, message = pending
        try:
            held = protocol.report_progress(task_id, token, percent, message)
        except redis.RedisError as exc:
            self._outage.failed(exc)  # logs the first failure of an outage only
            if not is_transient(exc):
                return None  # Redis refused this report: sending it again will not help
            with self._lock:
                if self._pending is None:  # no newer report meanwhile: keep this one
                    self._pending = pending
                if not self._retrying:
                    self._retrying = True
                    threading.Thread(target=self._retry, name="blueque-progress",
                                     daemon=True).start()
            return None
        self._outage.recovered()
        return held

    def _retry(self) -> None:
        """Send the newest report after each pause until one is delivered."""
        while True:
            time.sleep(self._outage.pause)
            with self._lock:
                if self._pending is None:
                    self._retrying = False
                    return
            self._send()


_reports = ProgressReports()


def report_progress(protocol: Protocol, task_id: str, token: str, percent: float,
                    message: str) -> bool | None:
    """See ProgressReports.report."""
    return _reports.report(protocol, task_id, token, percent, message)
