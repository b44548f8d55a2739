"""blueque 1.0's rule for orphans: a listener ``<host>_<pid>`` of this host whose pid is gone
is dead, now, whatever its heartbeat says (1.0 assumes one pid namespace per host name).
blueque 1.0's runner claims such orphans when it starts; ``Listener.claim_orphan`` and the
forking runner's start-up pass are built on this module. The listeners of our runners
(``<host>~<tag>_<pid>``, see keys.unique_listener_id) are never judged by pid, since
containers may share a host name; they, and the listeners of other hosts, are the reaper's.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, cast

from . import keys as k
from .maintenance import process_running

if TYPE_CHECKING:
    from .protocol import Protocol


def local_pid(listener_id: str, hostname: str) -> int | None:
    """The pid of a listener id ``<hostname>_<pid>``, else None."""
    parsed = k.parse_listener_id(listener_id)
    return parsed[1] if parsed is not None and parsed[0] == hostname else None


def dead_local_listeners(protocol: Protocol, queue: str, own_id: str) -> list[str]:
    """Listeners of ``queue`` that blueque 1.0's rule finds dead: from this host and their pid
    not running. It holds for ours too: on its own host a pid tells at once what an expired
    heartbeat tells 15 s later."""
    hostname = k.hostname()
    dead = []
    for listener_id in sorted(cast("set[str]",
                                   protocol.redis.smembers(protocol.keys.listeners(queue)))):
        pid = local_pid(listener_id, hostname)
        if listener_id != own_id and pid and pid != os.getpid() and not process_running(pid):
            dead.append(listener_id)
    return dead


def recover_local_orphans(protocol: Protocol, queue: str, own_id: str,
                          policy: Mapping[str, float | None] | None = None
                          ) -> tuple[list[str], list[str]]:
    """What blueque 1.0's runner does when it starts, for every dead listener of ``queue`` on
    this host at once: unregister it, put its unstarted tasks back in the queue, and fail (or
    retry, by the task's or ``policy``'s retries) its started tasks whose process is gone too.
    A started task whose process still runs is left to it: it records its own end.
    Returns ``(requeued ids, recovered ids)``."""
    requeued, recovered = [], []
    for listener_id in dead_local_listeners(protocol, queue, own_id):
        released = protocol.release_listener(listener_id, queue)
        if released is None:
            continue  # someone else released it
        protocol.forget_listener(listener_id, [queue])
        requeued += released[0]
        for task in protocol.read_tasks(released[1]):
            if task.status != k.STARTED or (task.pid and process_running(task.pid)):
                continue
            why = f"listener lost: {listener_id} and its task process {task.pid} are gone"
            outcome = protocol.finish(queue, task.id, listener_id=task.node or listener_id,
                                      pid=task.pid, token=task.lease, outcome=k.FAILED,
                                      value=why, error_type="ListenerLost", policy=policy)
            if outcome != "stale":
                recovered.append(task.id)
    return requeued, recovered
