"""The sweep: the window of queues a scheduler or reaper pass reads besides the indexes, for
data that blueque 1.0 wrote (it keeps no index). Bounded per pass, rotating through the queues
set pass after pass, so a pass never costs what is stored."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import redis

from .outages import is_transient

if TYPE_CHECKING:
    from .keys import Keys
    from .protocol import Protocol

logger = logging.getLogger("django_blueque.reaper")

SWEEP_QUEUES = 1000
"""Queues one pass sweeps (rotating through the queues set) for tasks no index lists."""

SWEEP_MEMBERS = 1000
"""Most started-set members one reaper pass sweeps (SSCAN, resumed at the next pass)."""

# (prefix, purpose) -> rank in the queues set where the next window starts
_sweep_starts: dict[tuple[str, str], int] = {}
# (prefix, queue) -> SSCAN cursor where its started set's sweep goes on
_started_scans: dict[tuple[str, str], int] = {}


def sweep_window(protocol: Protocol, purpose: str) -> list[str]:
    """The next SWEEP_QUEUES names of the queues set for ``purpose`` ('scheduler', 'reaper'),
    rotating: after N / SWEEP_QUEUES passes every queue has been swept. Empty (an error
    logged) when that key holds something else than a sorted set."""
    slot = (protocol.keys.prefix, purpose)
    start = _sweep_starts.get(slot, 0)
    try:
        names = protocol.access.queue_window(start, SWEEP_QUEUES)
    except redis.ResponseError as exc:
        if is_transient(exc):
            raise
        logger.error("the queues set %s is unreadable (%s): no queue to sweep",
                     protocol.keys.queues, exc)
        return []
    _sweep_starts[slot] = 0 if len(names) < SWEEP_QUEUES else start + SWEEP_QUEUES
    return names


def started_cursor(keys: Keys, queue: str) -> int:
    """Where the sweep of a queue's started set goes on (SSCAN cursor; 0: from the start)."""
    return _started_scans.get((keys.prefix, queue), 0)


def resume_started_at(keys: Keys, queue: str, cursor: int) -> None:
    if cursor:
        _started_scans[keys.prefix, queue] = cursor
    else:
        _started_scans.pop((keys.prefix, queue), None)
