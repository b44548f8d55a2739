"""The scheduler's and the reaper's operations on the protocol (Protocol.upkeep): moving due
tasks, expiring finished ones, reading lapsed leases from the indexes, and the sweep that keeps
the indexes right for tasks written by producers that do not keep them (blueque 1.0).

A pass reads the indexes' due entries only, and the sweep reads a bounded window of queues:
its cost follows what is due or lapsed, never what is stored.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import redis
from redis.cluster import RedisCluster

from . import keys as k

if TYPE_CHECKING:
    from .redis_access import RedisAccess

LAPSED_BATCH = 1000
"""Most lapsed leases (or listener heartbeats) one reaper pass reads from an index."""

EXPIRY_WINDOW = 1000
"""How many of a finished list's oldest tasks one expiry pass examines."""


def now() -> float:
    return time.time()


def encode_time(value: float) -> str:
    return repr(float(value))


ETA_LIMIT = 253402300800.0
"""10000-01-01 UTC: an ETA from then on (or inf) would keep its task scheduled for ever, and
no datetime can show it."""


def checked_eta(eta: float) -> float:
    """``eta`` as a float, refused unless a finite Unix time before the year 10000 (NaN would
    reach the script and fail there, naming its SHA)."""
    value = float(eta)
    if not math.isfinite(value) or value >= ETA_LIMIT:
        raise ValueError(f"eta must be a finite Unix time before the year 10000, not {eta!r}")
    return value


def _optional(value: float | None) -> float | str:
    """A number for a script argument, '' for None."""
    return "" if value is None else value


class UpkeepOperations:
    """The scheduler's and the reaper's operations, through ``access``; ``enqueue`` is the
    protocol's (Protocol.enqueue), which a periodic task's run goes through."""

    def __init__(self, access: RedisAccess, enqueue: Callable[..., list[str]],
                 forget_workflows: Callable[[Iterable[str]], int]) -> None:
        self.access = access
        self.keys = access.keys
        self.enqueue = enqueue
        self.forget_workflows = forget_workflows

    def enqueue_periodic(self, queue, due, *, make_task):
        """WATCH periodic; GET periodic; MULTI; SET periodic <due>; (enqueue's script); EXEC:
        claim a periodic task's due time and enqueue its run in one transaction, so that one
        scheduler enqueues it however many run. ``make_task()`` gives the run's (parameters,
        policy fields); it is called only when the run is enqueued. Returns the enqueued ids;
        [] when the due time was recorded without a run (the first time the task is seen);
        None when the due time was already claimed (by an earlier pass or another scheduler).
        """
        key = self.keys.periodic(queue)
        with self.access.redis.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(key)
                last = pipe.get(key)
                if last is not None and float(last) >= due:
                    return None
                pipe.multi()
                pipe.set(key, repr(due))
                ids = []
                if last is not None:
                    parameters, extra = make_task()
                    ids = self.enqueue(queue, [parameters], extra, pipe=pipe)
                pipe.execute()
            except redis.WatchError:
                return None  # another scheduler claimed this due time
        return ids

    def move_due(self, queue: str, batch: int = 1000, by_caller_clock: bool = False
                 ) -> list[str]:
        """Move due scheduled tasks to the queue (blueque 1.0's enqueue_due_tasks, atomic):
        due by Redis's clock, or with ``by_caller_clock`` by this process's, as 1.0 did.
        The queue's entry in the due index is then set to its next eta."""
        moved, stamp = [], encode_time(now())  # read once, as 1.0 does
        while True:
            step = self.access.script("move_due")(
                keys=[self.keys.scheduled(queue), self.keys.pending(queue),
                      self.keys.due_queues(queue), *self.keys.waiting(queue)[1:]],
                args=[stamp, self.access.task_prefix, batch, "1" if by_caller_clock else "0",
                      queue])
            moved += step
            if len(step) < batch:
                return moved

    def due_queues(self, limit: int) -> list[str]:
        """The queues of the due index whose earliest eta has come (Redis's clock)."""
        return self._come(self.keys.due_queues, limit)

    def _come(self, index_of, limit, dry_run=False):
        """The members of an index whose score has come on Redis's clock."""
        seconds, micros = self.access.redis.time()
        return self._each_index(index_of, limit, lambda client, index: client.zrangebyscore(
            index, "-inf", seconds + micros / 1e6, start=0, num=limit), dry_run)

    def _each_index(self, index_of, limit, read, dry_run):
        """``read(client, index)`` of each key of an index shared by every queue (see
        RedisAccess.indexes), through RedisAccess.each_key; at most ``limit`` entries in all.
        An index holding something else than a sorted set (someone else wrote it) reads as
        empty: it is derived data, shared by every queue, and left broken it would hide every
        queue's due tasks or lapsed leases for good, so it is deleted (not in a dry run), with
        an error logged, and the sweep builds it again."""
        indexes = self.access.indexes(index_of)
        found: list[Any] = []
        for index, reply in zip(indexes, self.access.each_key(indexes, read), strict=True):
            if isinstance(reply, redis.ResponseError):
                if not str(reply).startswith("WRONGTYPE"):
                    raise reply
                self.access.broken_index(index, mend=not dry_run)
            else:
                found += reply or []
        return found[:limit]

    def expire_finished(self, queue: str, status: str, default_retention: float | None = None,
                        batch: int = EXPIRY_WINDOW, dry_run: bool = False) -> int:
        """Delete (or with ``dry_run`` count) the tasks past their retention among the
        ``batch`` oldest of a finished list (see expire_finished.lua), and the records of the
        workflows whose last tasks they were."""
        deleted, workflows = self.access.script("expire_finished")(
            keys=[self.keys.finished(queue, status), self.keys.expiring_queues(queue),
                  self.keys.error_types(queue)],
            args=[self.access.task_prefix, f"{status} {queue}", _optional(default_retention), batch,
                  "1" if dry_run else "0",
                  self.keys.failed_of_type(queue, "") if status == k.FAILED else "",
                  self.keys.dependents("")])
        self.forget_workflows(workflows)
        return int(deleted)

    def expiring_lists(self, limit: int, dry_run: bool = False) -> list[tuple[str, str]]:
        """``[(status, queue)]`` of the expiring index whose earliest expiry has come."""
        entries = self._come(self.keys.expiring_queues, limit, dry_run)
        return [tuple(entry.split(" ", 1)) for entry in entries if " " in entry]

    def lapsed_leases(self, limit: int = LAPSED_BATCH, dry_run: bool = False
                      ) -> list[tuple[str, str, str, str, str]]:
        """``[(task id, queue, listener id, pid, token)]`` of the lease index whose lease
        has lapsed (see lapsed_leases.lua, which also tidies the index)."""
        lapsed = self.access.script("lapsed_leases")
        return [tuple(entry) for entry in self._each_index(
            self.keys.lease_expiries, limit, lambda client, index: lapsed(
                keys=[index], args=[self.access.task_prefix, self.keys.lease(""), limit,
                                    "1" if dry_run else "0"], client=client), dry_run)]

    def lapsed_listeners(self, limit: int = LAPSED_BATCH, dry_run: bool = False
                         ) -> list[tuple[str, str, float | None]]:
        """``[(queue, listener id, heartbeat expiry or None)]`` of the listener index whose
        heartbeat has lapsed (see lapsed_listeners.lua, which also tidies the index)."""
        (listeners, after), leases = (self.keys.around(self.keys.listeners),
                                      self.keys.around(self.keys.listener_leases)[0])
        return [(queue, listener, float(expiry) if expiry else None)
                for queue, listener, expiry in self._each_index(
                    self.keys.listener_expiries, limit, lambda client, index: self.access.script(
                        "lapsed_listeners")(keys=[index], args=[
                            listeners, leases, limit, "1" if dry_run else "0", after],
                                            client=client), dry_run)]

    def index_queues(self, queues: Iterable[str],
                     retention: Callable[[str], float | None] | None = None) -> int:
        """The sweep's upkeep of the due and expiring indexes for ``queues`` (see
        index_queues.lua); ``retention``: ``queue -> default seconds or None``."""
        groups = {group[0]: group for group in self.access.slot_groups(list(queues))}

        def index(client, first):
            keys = [self.keys.due_queues(first), self.keys.expiring_queues(first)]
            args: list[str | float] = [self.access.task_prefix]
            for queue in groups[first]:
                keys += [self.keys.scheduled(queue), self.keys.complete(queue),
                         self.keys.failed(queue)]
                args += [queue, _optional(retention(queue) if retention else None)]
            return self.access.script("index_queues")(keys=keys, args=args, client=client)

        written = 0
        for reply in self.access.each_key(list(groups), index):
            if isinstance(reply, Exception):
                raise reply
            written += reply or 0
        return written

    def forget_started(self, queue: str, member: str) -> None:
        """Drop a started-set member whose task hash is gone."""
        self.access.redis.srem(self.keys.started(queue), member)

    def server_clock(self, probe_writes: bool = True) -> tuple[float, float]:
        """``(Redis's time in seconds, seconds since Redis started)``, once Redis has taken a
        write (raises otherwise; ``probe_writes=False`` writes nothing): leases are judged on
        Redis's clock, and only while Redis takes the writes that renew them (see
        maintenance.Reaper)."""
        server = self.access.redis
        if isinstance(server, RedisCluster):  # the clock of the node holding reaper_clock
            server = server.get_node_from_key(self.keys.reaper_clock).redis_connection
        with server.pipeline(transaction=False) as pipe:
            if probe_writes:
                pipe.set(self.keys.reaper_clock, encode_time(now()), px=60_000)
            pipe.time()
            pipe.info("server")
            *_, (seconds, micros), info = pipe.execute()
        return seconds + micros / 1e6, float(info.get("uptime_in_seconds", 0))
