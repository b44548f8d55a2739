"""The scheduler and the reaper, safe to run from any node and from several processes at once
(every change is one atomic, guarded step). The loops that call them live in the management
commands and, with --with-scheduler, in the listener.

A pass costs what is due or lapsed, not what is stored: it reads the due entries of the
indexes our producers and listeners keep (keys.due_queues, lease_expiries, listener_expiries,
expiring_queues), plus a sweep of a bounded window of queues (core/sweep.py), rotating pass
after pass, for what blueque 1.0 wrote (which keeps no index).
"""

from __future__ import annotations

import logging
import os
import time
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import redis

from . import keys as k
from . import sweep
from .outages import is_transient
from .protocol_upkeep import LAPSED_BATCH

if TYPE_CHECKING:
    from .protocol import Protocol

class HasProtocol(typing.Protocol):
    """What reap() and enqueue_due_tasks() take: an engine Client (anything with a protocol)."""

    @property
    def protocol(self) -> Protocol: ...


Policy = Callable[[str], Mapping[str, float | None]]
"""``queue -> {'retries', 'backoff', 'timeout', 'retention'}``: a queue's defaults."""

logger = logging.getLogger("django_blueque.reaper")


@dataclass(frozen=True)
class Action:
    """One thing the reaper did (or, in a dry run, would do)."""

    queue: str
    what: str
    why: str
    task_id: str = ""
    listener_id: str = ""

    def __str__(self) -> str:
        subject = f"task {self.task_id}" if self.task_id else f"listener {self.listener_id}"
        return f"{self.queue}: {subject}: {self.what} ({self.why})"


def process_running(pid: int) -> bool:
    """blueque 1.0's liveness rule for a local pid (a zombie counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def enqueue_due_tasks(client: HasProtocol, queues: Iterable[str] | None = None
                      ) -> dict[str, list[str]]:
    """Move due scheduled tasks of the given queues, or of the queues the due index says are
    due (after sweeping the next window of queues into it); returns {queue: [ids]}. A queue
    whose keys hold the wrong type is skipped with a warning: the others go on."""
    if queues is None:
        window = sweep.sweep_window(client.protocol, "scheduler")
        if window:
            client.protocol.upkeep.index_queues(window)
        queues = client.protocol.upkeep.due_queues(LAPSED_BATCH)
    moved: dict[str, list[str]] = {}
    for queue in queues:
        ids = _unless_refused(queue, "due tasks not moved", client.protocol.upkeep.move_due,
                              queue)
        if ids:
            moved[queue] = ids
    return moved


RECHECK_SECONDS = 2.0
"""How soon a reaper looks again at the leases it suspects."""


class Reaper:
    """The reaper, with its memory between passes.

    A listener's heartbeat or a task's lease that has lapsed is acted on only once this reaper
    has seen it lapsed for ``Timings.confirm`` seconds of Redis's clock, in passes never more
    than ``Timings.max_gap`` apart (further apart: Redis was away, or this process was
    stopped, and nobody could renew meanwhile), on a Redis up for at least as long. A lease
    that lapsed because Redis itself was away (stopped, restarting, failing over: nobody could
    renew) is therefore renewed by its living process before anyone acts on it; a dead
    process's lease stays lapsed and is acted on. Every action is one guarded atomic step, so
    any number of reapers may run.
    """

    def __init__(self, protocol: Protocol, *, policy: Policy | None = None,
                 hostname: str | None = None, confirm: float | None = None) -> None:
        self.protocol = protocol
        self.policy: Policy = policy or (lambda queue: {})
        self.hostname = hostname or k.hostname()
        self.confirm = protocol.timings.confirm if confirm is None else confirm
        self.max_gap = protocol.timings.max_gap
        # (kind, queue, name) -> Redis time first seen lapsed
        self._suspects: dict[tuple[str, str, str], float] = {}
        self._last_pass: float | None = None  # Redis time of the last pass that reached Redis

    @property
    def undecided(self) -> bool:
        """True while some lapsed lease is being watched: look again within RECHECK_SECONDS."""
        return bool(self._suspects)

    def reap(self, queues: Iterable[str] | None = None, dry_run: bool = False
             ) -> list[Action]:
        """One pass: release dead listeners, recover the tasks of dead processes, delete
        finished tasks past their retention, settle the dependents ends left waiting.
        Returns the Actions done (or, with ``dry_run``, those it would do now for every lease
        lapsed at this moment)."""
        try:
            now, uptime = self.protocol.upkeep.server_clock(probe_writes=not dry_run)
            queues = list(queues if queues is not None
                          else sweep.sweep_window(self.protocol, "reaper"))
            if self._last_pass is None or now - self._last_pass > self.max_gap \
                    or uptime < self.confirm:
                self._suspects.clear()  # Redis was away, refused writes or restarted
            self._last_pass = now
            self._clock, self._uptime, self._dry_run = now, uptime, dry_run
            self._seen: set[tuple[str, str, str]] = set()
            self._handled: set[tuple[str, str, str]] = set()
            actions = self._reap_listeners(queues)
            actions += self._recover_lost_tasks(queues)
            actions += self._expire(queues)
            actions += self._settle_dependents(queues)
        except redis.RedisError:
            # Redis away or refusing writes: nobody could renew meanwhile; start over
            self._last_pass = None
            self._suspects.clear()
            raise
        for subject in set(self._suspects) - self._seen:
            del self._suspects[subject]  # renewed since: alive
        return actions

    def _lapsed_long_enough(self, subject: tuple[str, str, str]) -> bool:
        """Note a lapsed lease; True once it has been lapsed long enough to act on."""
        self._seen.add(subject)
        if self._dry_run:
            return True
        first = self._suspects.setdefault(subject, self._clock)
        return self._clock - first >= self.confirm and self._uptime >= self.confirm

    def _reap_listeners(self, queues: Sequence[str]) -> list[Action]:
        """Release dead listeners: requeue every task they reserved but had not started.
        Ours are dead once their heartbeat has lapsed long enough; blueque 1.0's (no
        heartbeat) by 1.0's own rule only: same host and pid not running."""
        actions: list[Action] = []
        for queue, listener_id, expiry in self.protocol.upkeep.lapsed_listeners(
                dry_run=self._dry_run):
            leases: dict[str, float] = {} if expiry is None else {listener_id: expiry}
            actions += self._judge_listener(queue, listener_id, leases)
        keys = self.protocol.keys
        replies = sweep.read(self.protocol, [command for queue in queues for command in (
            lambda pipe, q=queue: pipe.smembers(keys.listeners(q)),
            lambda pipe, q=queue: pipe.zrange(keys.listener_leases(q), 0, -1, withscores=True))])
        for index, queue in enumerate(queues):
            members, leases = replies[2 * index], replies[2 * index + 1]
            if _skip_broken(queue, "listeners", members, leases):
                continue
            leases = dict(leases)
            for listener_id in sorted(members):
                actions += self._judge_listener(queue, listener_id, leases)
        return actions

    def _judge_listener(self, queue: str, listener_id: str, leases: Mapping[str, float]
                        ) -> list[Action]:
        if ("listener", queue, listener_id) in self._handled:
            return []  # seen in the index and in the sweep's window
        self._handled.add(("listener", queue, listener_id))
        why = self._why_dead(queue, listener_id, leases)
        return self._release(queue, listener_id, why) if why else []

    def _why_dead(self, queue: str, listener_id: str, leases: Mapping[str, float]
                  ) -> str | None:
        parsed = k.parse_listener_id(listener_id)
        if parsed is None:
            logger.warning("queue %s: skipping malformed listener id %r", queue, listener_id)
            return None
        host, pid = parsed
        if listener_id in leases or k.OUR_LISTENER_MARK in host:
            expiry = leases.get(listener_id, float("-inf"))
            if expiry >= self._clock or not self._lapsed_long_enough(
                    ("listener", queue, listener_id)):
                return None
            return (f"heartbeat expired {self._clock - expiry:.0f} s ago"
                    if expiry > float("-inf") else "no heartbeat")
        if host == self.hostname and not process_running(pid):
            return f"blueque 1.0 listener: pid {pid} is gone"
        return None

    def _release(self, queue: str, listener_id: str, why: str) -> list[Action]:
        protocol = self.protocol
        if self._dry_run:
            reserved = cast("list[str]", protocol.redis.lrange(
                protocol.keys.reserved(queue, listener_id), 0, -1))
            return [Action(queue, "would release listener", why, listener_id=listener_id)] + [
                Action(queue, "would requeue or check", f"held by dead {listener_id}", task_id)
                for task_id in reserved]
        released = protocol.release_listener(listener_id, queue)
        if released is None:
            return []  # another reaper got there first
        protocol.forget_listener(listener_id, [queue])
        requeued, _started = released  # started ones are left to the lease sweep
        return [Action(queue, "released listener", why, listener_id=listener_id)] + [
            Action(queue, "requeued", f"reserved by dead listener {listener_id}, never started",
                   task_id) for task_id in requeued]

    def _recover_lost_tasks(self, queues: Sequence[str]) -> list[Action]:
        """Fail or retry started tasks whose process is gone: ours once their lease has
        lapsed long enough; blueque 1.0's when their listener is gone and their pid is not
        running on this host."""
        actions: list[Action] = []
        for task_id, queue, listener_id, pid, token in self.protocol.upkeep.lapsed_leases(
                dry_run=self._dry_run):
            parsed = k.parse_listener_id(listener_id)
            if not (k.valid_name(queue) and parsed and pid.isdigit()):
                logger.warning("task %r: lease lapsed but its queue, node or pid is unreadable;"
                               " left to the sweep", task_id)
                continue
            member = self.protocol.keys.started_member(listener_id, pid, task_id)
            actions += self._recover(queue, member, listener_id, int(pid), task_id, (),
                                     k.STARTED, token, None, False)
        keys = self.protocol.keys
        queues = sweep.within_budget(self.protocol, queues,
                                     lambda q, pipe: pipe.scard(keys.started(q)))
        replies = sweep.read(self.protocol, [command for queue in queues for command in (
            lambda pipe, q=queue: pipe.sscan(keys.started(q), sweep.scan_cursor(
                keys, "started", q), count=sweep.SWEEP_MEMBERS),
            lambda pipe, q=queue: pipe.smembers(keys.listeners(q)))])
        candidates: list[tuple[str, str, str, int, str, set[str]]] = []
        for index, queue in enumerate(queues):
            started, listeners = replies[2 * index], replies[2 * index + 1]
            if _skip_broken(queue, "started tasks", started, listeners):
                continue
            cursor, started = started
            sweep.resume_scan_at(keys, "started", queue, cursor)
            for member in started:
                member_parts = k.parse_started_member(member)
                if member_parts is None:
                    logger.warning("queue %s: skipping malformed started member %r", queue,
                                   member)
                    continue
                candidates.append((queue, member, *member_parts, listeners))
        if not candidates:
            return actions
        states = sweep.read(self.protocol, [command for candidate in candidates for command in (
            lambda pipe, t=candidate[4]: pipe.hmget(keys.task(t), "status", "lease",
                                                    "reclaimed_node"),
            lambda pipe, t=candidate[4]: pipe.exists(keys.lease(t)))])
        for index, candidate in enumerate(candidates):
            state, lease_alive = states[2 * index], states[2 * index + 1]
            if isinstance(state, Exception) or isinstance(lease_alive, Exception):
                logger.warning("queue %s: task %r is not a hash; skipped", candidate[0],
                               candidate[4])
                continue
            status, token, reclaimed = state  # HMGET of three fields
            actions += self._recover(*candidate, status, token, reclaimed, lease_alive)
        return actions

    def _recover(self, queue: str, member: str, listener_id: str, pid: int, task_id: str,
                 listeners: Iterable[str], status: str | None, token: str | None,
                 reclaimed: str | None, lease_alive: bool | int) -> list[Action]:
        if ("task", queue, member) in self._handled:
            return []  # seen in the index and in the sweep's window
        self._handled.add(("task", queue, member))
        protocol = self.protocol
        if status is None:
            if not self._dry_run:
                protocol.upkeep.forget_started(queue, member)
            return [Action(queue, "dropped started entry", "task hash is gone", task_id)]
        if status != k.STARTED:
            return []
        if reclaimed:
            token = ""  # taken over by a blueque 1.0 worker: its process holds no lease
        if token:
            if lease_alive or not self._lapsed_long_enough(("task", queue, member)):
                return []
            why = (f"its process stopped renewing its lease while its listener {listener_id} "
                   f"lived (the process was cut off from Redis, or is not the listener's "
                   f"child)" if listener_id in listeners else
                   f"listener lost: {listener_id} and the task's process stopped renewing its "
                   f"lease")
        else:
            host = (k.parse_listener_id(listener_id) or ("", 0))[0]
            if listener_id in listeners or host != self.hostname or process_running(pid):
                return []
            why = f"listener lost: blueque 1.0 process {pid} on {listener_id} is gone"
        if self._dry_run:
            return [Action(queue, "would fail or retry", why, task_id)]
        outcome = _unless_refused(
            queue, f"task {task_id} not recovered", protocol.finish, queue, task_id,
            listener_id=listener_id, pid=pid, token=token, outcome=k.FAILED, value=why,
            error_type="ListenerLost", policy=self.policy(queue), lapsed_only=True)
        if outcome in (None, "stale"):
            return []
        return [Action(queue, "retried" if outcome == "retry" else "failed", why, task_id)]

    def _settle_dependents(self, queues: Sequence[str]) -> list[Action]:
        """Settle the dependents that ends left waiting: those of a process that died before
        it settled them all, and those of an end blueque 1.0 recorded (its scripts know
        nothing of dependents), found in a window of the queues' waiting tasks. A dry run
        reads the window's first waiting tasks and settles nothing."""
        workflows, keys, dry = self.protocol.workflows, self.protocol.keys, self._dry_run
        actions: list[Action] = []
        for queue in sweep.within_budget(self.protocol, queues,
                                         lambda q, pipe: pipe.zcard(keys.waiting_tasks(q))):
            cursor = 0 if dry else sweep.scan_cursor(keys, "waiting", queue)
            named = _unless_refused(queue, "waiting tasks not read", workflows.name_stranded,
                                    queue, cursor, sweep.SWEEP_MEMBERS, dry)
            if named is not None:
                if not dry:
                    sweep.resume_scan_at(keys, "waiting", queue, named[0])
                actions += [Action(queue, f"{'would settle' if dry else 'settled'} its "
                                   "dependents", "a blueque 1.0 worker recorded its end, which "
                                   "left tasks of this queue waiting", task_id)
                            for task_id in named[1]]
        if dry:
            return actions
        shared = [""] if not keys.cluster else queues  # the settling index: one, or per queue
        for queue in sweep.within_budget(self.protocol, shared,
                                         lambda q, pipe: pipe.hlen(keys.settling(q))):
            _unless_refused(queue or "*", "dependents not settled", workflows.settle, queue)
        return actions

    def _expire(self, queues: Sequence[str]) -> list[Action]:
        """Expire the finished lists the expiring index says are due, after sweeping the
        window's queues into it."""
        protocol = self.protocol
        lists: Iterable[tuple[str, str]] = protocol.upkeep.expiring_lists(LAPSED_BATCH,
                                                                   dry_run=self._dry_run)
        if self._dry_run:  # nothing written: the window's lists are looked at directly
            lists = set(lists) | {(status, queue) for queue in queues for status in k.FINISHED}
        elif queues:
            protocol.upkeep.index_queues(queues, lambda queue: self.policy(queue).get("retention"))
            lists = protocol.upkeep.expiring_lists(LAPSED_BATCH)
        actions: list[Action] = []
        for status, queue in sorted(lists, key=lambda entry: (entry[1], entry[0])):
            actions += _expire_list(self.protocol, queue, status,
                                    self.policy(queue).get("retention"), self._dry_run)
        return actions


def _skip_broken(queue: str, what: str, *replies: object) -> bool:
    broken = [reply for reply in replies if isinstance(reply, Exception)]
    if broken:
        logger.warning("queue %s: %s not read: %s", queue, what, broken[0])
    return bool(broken)


def _unless_refused(queue: str, what: str, call: Callable[..., Any], *args: Any,
                    **kwargs: Any) -> Any:
    """``call(*args, **kwargs)``, or None (``what`` logged) when a key of the queue holds the
    wrong type: the pass goes on with the other queues."""
    try:
        return call(*args, **kwargs)
    except redis.ResponseError as exc:
        if is_transient(exc):
            raise
        logger.warning("queue %s: %s: %s", queue, what, exc)
        return None


def _expire_list(protocol: Protocol, queue: str, status: str, default: float | None,
                 dry_run: bool) -> list[Action]:
    count = _unless_refused(queue, f"{status} tasks not expired",
                            protocol.upkeep.expire_finished, queue, status, default,
                            dry_run=dry_run)
    if not count:
        return []
    return [Action(queue, f"{'would delete' if dry_run else 'deleted'} {count} {status} tasks",
                   "retention passed")]


def reap(client: HasProtocol, queues: Iterable[str] | None = None,
         retention: float | Callable[[str], float | None] | None = None, dry_run: bool = False,
         hostname: str | None = None, *, policy: Policy | None = None,
         confirm: float | None = None) -> list[Action]:
    """Reap until decided: passes RECHECK_SECONDS apart until no lapsed lease is left
    undecided (at most about ``confirm`` seconds). Returns the Actions (the caller reports
    them: bq_reap prints them). A dry run is one pass that reports every lapsed lease.
    ``policy``: ``queue -> {'retries', 'backoff', 'retention'}``, the queue's defaults for
    tasks that lack them; or ``retention``: seconds, or ``queue -> seconds``."""
    if policy is None:
        def policy(queue: str) -> Mapping[str, float | None]:
            return {"retention": retention(queue) if callable(retention) else retention}
    reaper = Reaper(client.protocol, policy=policy, hostname=hostname, confirm=confirm)
    actions = reaper.reap(queues, dry_run)
    while reaper.undecided and not dry_run:
        time.sleep(RECHECK_SECONDS)
        actions += reaper.reap(queues)
    return actions
