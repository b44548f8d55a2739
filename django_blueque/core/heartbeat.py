"""A listener's heartbeat: its word to Redis that it lives, and the leases of its tasks.

One beat is one round of scripts: the heartbeat key of each of its queues (a short one while
tasks run, a long one while idle: fewer commands), its info hash when it changed or after a
re-registration, the cancellations asked for its running tasks, and the lease of every task
process it knows is alive (it is their parent). The time of a beat that renewed them all goes
into the ``Beacon`` its task processes read, so a process that cannot renew its own lease
(its code holds the GIL, it is stopped) knows its lease is kept (lease.py).
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING

from . import keys as k
from .lease import Beacon

if TYPE_CHECKING:
    from .children import Child
    from .protocol import Protocol

logger = logging.getLogger("django_blueque.listener")


class Heartbeat:
    """When the listener beats next, and what it last told Redis about itself."""

    def __init__(self, protocol: Protocol, listener_id: str, queues: list[str],
                 concurrency: int, leases: dict[str, float]) -> None:
        self.protocol = protocol
        self.timings = protocol.timings
        self.listener_id = listener_id
        self.queues = queues
        self.concurrency = concurrency
        self.leases = leases  # a queue's lease, in seconds (a queue may have a longer one)
        self.beacon = Beacon()
        self.next_at = 0.0  # monotonic
        self.started_at = time.time()
        self.stopping = False  # it takes no new task: told to stop, it finishes its running ones
        self._sent_info: dict[str, object] | None = None

    def task_started(self, current: float) -> None:
        """Busy now: beat at the busy pace from here on. A listener that was idle beats at
        once (its loop does, once the task is handed over): the take cut its heartbeat's expiry
        to the busy one (reserve.lib), and until its info hash names the busy lease too, its
        last beat reads as ``idle_heartbeat - heartbeat`` seconds older than it is
        (``rows.ListenerRow.beat``). A busy one beats when the task's lease, just made by the
        take, wants its first renewal."""
        if self._sent_info and self._sent_info["lease"] == self.timings.heartbeat:
            self.next_at = min(self.next_at, current + self.timings.beat_every)
        else:
            self.next_at = current

    def stop_taking(self) -> None:
        """The listener takes no new task from now on: its info hash says so at once (the
        admin shows it stopping, finishing its running tasks, which may take hours)."""
        if not self.stopping:
            self.stopping = True
            self.next_at = 0.0

    def lost(self) -> None:
        """Redis did not answer: beat (and re-register) as soon as it does again."""
        self.next_at = 0.0

    def beat(self, current: float, running: list[Child], busy: bool) -> tuple[list[str],
                                                                              list[str]]:
        """Beat now; returns the ids of the running tasks whose cancellation is asked, and
        the queues whose listener keys hold the wrong type."""
        ttl = self.timings.heartbeat if busy else self.timings.idle_heartbeat
        info: dict[str, object] = {
            "host": k.hostname(), "pid": os.getpid(), "queues": ",".join(self.queues),
            "concurrency": self.concurrency, "running": len(running),
            "since": repr(self.started_at), "lease": ttl}
        if self.stopping:
            info["stopping"] = 1
        changed = info if info != self._sent_info else None
        registered, cancels, skipped = self.protocol.heartbeat(
            self.listener_id, self.queues, changed, collect_cancels=bool(running), ttl=ttl)
        if registered and changed is None:
            self.protocol.heartbeat(self.listener_id, self.queues, info, collect_cancels=False,
                                    ttl=ttl)
        held = self.protocol.renew_leases([(child.task_id, child.token, self.leases[child.queue])
                                           for child in running])
        self.beacon.confirm(current)
        for child, kept in zip(running, held, strict=True):
            if not kept:
                logger.info("listener %s: task %s: its lease is no longer its own (ended, or "
                            "recovered elsewhere)", self.listener_id, child.label)
        self._sent_info = info
        self.next_at = current + (self.timings.beat_every if busy
                                  else self.timings.idle_heartbeat / 3)
        return cancels, skipped
