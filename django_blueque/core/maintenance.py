"""The scheduler and the reaper: one-shot functions, safe to run from any node and from several
processes at once (every change is one atomic, guarded step). The loops that call them live in
:mod:`django_blueque.core.runner` and in the management commands.

The reaper's work grows with listeners and running tasks, never with stored tasks: it reads the
listeners sets, the listener-lease sets and the started sets, and the tails of finished lists.
"""

import logging
import os
import socket
from dataclasses import dataclass

from . import keys as k
from .protocol import now

logger = logging.getLogger("django_blueque.reaper")


@dataclass(frozen=True)
class Action:
    """One thing the reaper did (or, in a dry run, would do)."""

    queue: str
    what: str
    why: str
    task_id: str = ""
    listener_id: str = ""

    def __str__(self):
        subject = f"task {self.task_id}" if self.task_id else f"listener {self.listener_id}"
        return f"{self.queue}: {subject}: {self.what} ({self.why})"


def process_running(pid):
    """blueque 1.0's liveness rule for a local pid (a zombie counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def enqueue_due_tasks(client, queues=None):
    """Move due scheduled tasks of every queue (or the given ones); returns {queue: [ids]}."""
    moved = {}
    for queue in queues if queues is not None else client.queue_names():
        ids = client.protocol.move_due(queue)
        if ids:
            moved[queue] = ids
    return moved


def _dead_listeners(client, queues, hostname):
    """[(queue, listener id, why)] of listeners that are dead: ours whose heartbeat expired;
    blueque 1.0's (no heartbeat) by its own rule only: same host and pid not running."""
    redis = client.redis
    with redis.pipeline(transaction=False) as pipe:
        for queue in queues:
            pipe.smembers(client.keys.listeners(queue))
            pipe.zrange(client.keys.listener_leases(queue), 0, -1, withscores=True)
        replies = pipe.execute()
    current = now()
    dead = []
    for index, queue in enumerate(queues):
        members, leases = replies[2 * index], dict(replies[2 * index + 1])
        for listener_id in sorted(members):
            parsed = k.parse_listener_id(listener_id)
            if parsed is None:
                logger.warning("queue %s: skipping malformed listener id %r", queue, listener_id)
                continue
            host, pid = parsed
            if listener_id in leases:
                if leases[listener_id] < current:
                    silent = current - leases[listener_id]
                    dead.append((queue, listener_id, f"heartbeat expired {silent:.0f} s ago"))
            elif host == hostname and not process_running(pid):
                dead.append((queue, listener_id, f"blueque 1.0 listener: pid {pid} is gone"))
        for listener_id, expiry in leases.items():
            if listener_id not in members and expiry < current:
                # left over after someone else released it: drop the stale lease entry
                redis.zrem(client.keys.listener_leases(queue), listener_id)
    return dead


def reap_listeners(client, queues=None, dry_run=False, hostname=None):
    """Release dead listeners: requeue every task they reserved but had not started."""
    queues = list(queues if queues is not None else client.queue_names())
    hostname = hostname or socket.getfqdn()
    actions = []
    for queue, listener_id, why in _dead_listeners(client, queues, hostname):
        if dry_run:
            reserved = client.redis.lrange(client.keys.reserved(queue, listener_id), 0, -1)
            actions.append(Action(queue, "would release listener", why, listener_id=listener_id))
            actions += [Action(queue, "would requeue or check", f"held by dead {listener_id}",
                               task_id) for task_id in reserved]
            continue
        released = client.protocol.release_listener(listener_id, queue)
        if released is None:
            continue  # another reaper got there first
        client.protocol.forget_listener(listener_id)
        actions.append(Action(queue, "released listener", why, listener_id=listener_id))
        requeued, _started = released
        actions += [Action(queue, "requeued", f"reserved by dead listener {listener_id}, "
                           "never started", task_id) for task_id in requeued]
        # started tasks are left to the started-set sweep: running ones hold a lease
    return actions


def recover_lost_tasks(client, queues=None, dry_run=False, hostname=None):
    """Fail or retry started tasks whose process is gone: ours once their lease expired;
    blueque 1.0's when their listener is gone and their pid is not running on this host."""
    queues = list(queues if queues is not None else client.queue_names())
    hostname = hostname or socket.getfqdn()
    redis, keys = client.redis, client.keys
    with redis.pipeline(transaction=False) as pipe:
        for queue in queues:
            pipe.smembers(keys.started(queue))
            pipe.smembers(keys.listeners(queue))
        replies = pipe.execute()
    candidates = []
    for index, queue in enumerate(queues):
        listeners = replies[2 * index + 1]
        for member in replies[2 * index]:
            parsed = k.parse_started_member(member)
            if parsed is None:
                logger.warning("queue %s: skipping malformed started member %r", queue, member)
                continue
            candidates.append((queue, member, *parsed, listeners))
    if not candidates:
        return []
    with redis.pipeline(transaction=False) as pipe:
        for _queue, _member, _listener, _pid, task_id, _listeners in candidates:
            pipe.hmget(keys.task(task_id), "status", "lease", "reclaimed_node")
            pipe.exists(keys.lease(task_id))
        states = pipe.execute()
    actions = []
    for index, (queue, member, listener_id, pid, task_id, listeners) in enumerate(candidates):
        (status, token, reclaimed), lease_alive = states[2 * index], states[2 * index + 1]
        if status is None:
            if not dry_run:
                redis.srem(keys.started(queue), member)
            actions.append(Action(queue, "dropped started entry", "task hash is gone", task_id))
            continue
        if status != k.STARTED:
            continue
        if reclaimed:
            token = ""  # taken over by a blueque 1.0 worker: its process holds no lease
        if token:
            if lease_alive:
                continue
            why = f"listener lost: the task's process on {listener_id} stopped renewing its lease"
        else:
            host = (k.parse_listener_id(listener_id) or ("", 0))[0]
            if listener_id in listeners or host != hostname or process_running(pid):
                continue
            why = f"listener lost: blueque 1.0 process {pid} on {listener_id} is gone"
        if dry_run:
            actions.append(Action(queue, "would fail or retry", why, task_id))
            continue
        outcome = client.protocol.finish(queue, task_id, listener_id, pid, token, k.FAILED, why,
                                         error_type="ListenerLost", lapsed_only=True)
        if outcome != "stale":
            actions.append(Action(queue, "retried" if outcome == "retry" else "failed", why,
                                  task_id))
    return actions


def expire_finished(client, queues=None, retention=None, dry_run=False):
    """Delete finished tasks whose retention has passed (oldest first, never before).

    ``retention`` is the default in seconds for tasks without their own (None: keep them), or
    a callable ``queue -> seconds or None``."""
    queues = list(queues if queues is not None else client.queue_names())
    actions = []
    for queue in queues:
        default = retention(queue) if callable(retention) else retention
        for status in k.FINISHED:
            count = client.protocol.expire_finished(queue, status, default, dry_run=dry_run)
            if count:
                actions.append(Action(queue, f"{'would delete' if dry_run else 'deleted'} "
                                      f"{count} {status} tasks", "retention passed"))
    return actions


def reap(client, queues=None, retention=None, dry_run=False, hostname=None):
    """One full reaper pass; returns the list of Actions (the caller reports them: bq_reap
    prints them, a listener running the reaper logs them)."""
    queues = list(queues if queues is not None else client.queue_names())
    actions = reap_listeners(client, queues, dry_run, hostname)
    actions += recover_lost_tasks(client, queues, dry_run, hostname)
    actions += expire_finished(client, queues, retention, dry_run)
    return actions
