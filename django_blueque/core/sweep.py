"""The sweep: the window of queues a scheduler or reaper pass reads besides the indexes, for
data that blueque 1.0 wrote (it keeps no index). Bounded per pass, rotating through the queues
set pass after pass, so a pass never costs what is stored."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, cast

import redis

from .outages import is_transient

if TYPE_CHECKING:
    from .keys import Keys
    from .protocol import Protocol

logger = logging.getLogger("django_blueque.reaper")

SWEEP_QUEUES = 1000
"""Queues one pass sweeps (rotating through the queues set) for tasks no index lists."""

SWEEP_MEMBERS = 1000
"""Most members of queues' started sets (SSCAN), or of their waiting tasks (ZSCAN), one reaper
pass reads, resumed at the next pass."""

# (prefix, purpose) -> rank in the queues set where the next window starts
_sweep_starts: dict[tuple[str, str], int] = {}
# (prefix, what, queue) -> cursor where the scan of that queue's set ('started', 'waiting')
# goes on
_scans: dict[tuple[str, str, str], int] = {}


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


def scan_cursor(keys: Keys, what: str, queue: str) -> int:
    """Where the scan of a queue's set ``what`` goes on (0: from the start)."""
    return _scans.get((keys.prefix, what, queue), 0)


def resume_scan_at(keys: Keys, what: str, queue: str, cursor: int) -> None:
    if cursor:
        _scans[keys.prefix, what, queue] = cursor
    else:
        _scans.pop((keys.prefix, what, queue), None)


def read(protocol: Protocol, commands: Iterable[Callable[[Any], object]]) -> list[Any]:
    """The replies of a read-only pipeline of per-queue ``commands(pipe)``; a queue whose key
    holds the wrong type gives an exception instead of its reply (for the caller to skip)."""
    with protocol.redis.pipeline(transaction=False) as pipe:
        for command in commands:
            command(pipe)
        return pipe.execute(raise_on_error=False)


def within_budget(protocol: Protocol, queues: Sequence[str],
                  size_of: Callable[[str, Any], object]) -> list[str]:
    """The window's queues whose set (``size_of(queue, pipe)`` its size) a pass scans: those
    with members, in order, while the members read stay within SWEEP_MEMBERS (at least one
    queue). One whose key holds the wrong type is kept, for its scan to report."""
    sizes = read(protocol, [partial(size_of, queue) for queue in queues])
    chosen: list[str] = []
    budget = SWEEP_MEMBERS
    for queue, size in zip(queues, sizes, strict=True):
        if isinstance(size, Exception):
            chosen.append(queue)
        elif size and budget > 0:
            chosen.append(queue)
            budget -= min(cast(int, size), SWEEP_MEMBERS)
    return chosen
