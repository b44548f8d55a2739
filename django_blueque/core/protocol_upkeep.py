"""The scheduler's and the reaper's operations on the protocol (a part of Protocol, kept apart
to keep modules short): moving due tasks, expiring finished ones, reading lapsed leases from
the indexes, and the sweep that keeps the indexes right for tasks written by producers that
do not keep them (blueque 1.0).

A pass reads the indexes' due entries only, and the sweep reads a bounded window of queues:
its cost follows what is due or lapsed, never what is stored.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, cast

import redis
from redis.cluster import RedisCluster

from . import keys as k

if TYPE_CHECKING:
    from .keys import Keys

logger = logging.getLogger("django_blueque.reaper")

LAPSED_BATCH = 1000
"""Most lapsed leases (or listener heartbeats) one reaper pass reads from an index."""

EXPIRY_WINDOW = 1000
"""How many of a finished list's oldest tasks one expiry pass examines."""


def now() -> float:
    return time.time()


def encode_time(value: float) -> str:
    return repr(float(value))


def _optional(value: float | None) -> float | str:
    """A number for a script argument, '' for None."""
    return "" if value is None else value


class UpkeepOperations:
    """Mixed into Protocol: uses its ``redis``, ``keys``, ``script``, ``_task_prefix`` and
    ``enqueue``."""

    if TYPE_CHECKING:  # Protocol's, declared for the type checker
        redis: redis.Redis | RedisCluster
        keys: Keys
        _task_prefix: str
        enqueue: Callable[..., list[str]]

        def script(self, name: str) -> Callable[..., Any]: ...

        def slot_groups(self, queues: list[str]) -> list[list[str]]: ...

    def enqueue_periodic(self, queue, due, *, make_task):
        """WATCH periodic; GET periodic; MULTI; SET periodic <due>; (enqueue's script); EXEC:
        claim a periodic task's due time and enqueue its run in one transaction, so that one
        scheduler enqueues it however many run. ``make_task()`` gives the run's (parameters,
        policy fields); it is called only when the run is enqueued. Returns the enqueued ids;
        [] when the due time was recorded without a run (the first time the task is seen);
        None when the due time was already claimed (by an earlier pass or another scheduler).
        """
        key = self.keys.periodic(queue)
        with self.redis.pipeline(transaction=True) as pipe:
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
            step = self.script("move_due")(
                keys=[self.keys.scheduled(queue), self.keys.pending(queue),
                      self.keys.due_queues(queue), *self.keys.waiting(queue)[1:]],
                args=[stamp, self._task_prefix, batch, "1" if by_caller_clock else "0", queue])
            moved += step
            if len(step) < batch:
                return moved

    def due_queues(self, limit: int) -> list[str]:
        """The queues of the due index whose earliest eta has come (Redis's clock)."""
        return self._come(self.keys.due_queues, limit)

    def _come(self, index_of, limit, dry_run=False):
        """The members of an index whose score has come on Redis's clock."""
        seconds, micros = self.redis.time()
        return self._each_index(index_of, limit, lambda client, index: client.zrangebyscore(
            index, "-inf", seconds + micros / 1e6, start=0, num=limit), dry_run)

    def _each_index(self, index_of, limit, read, dry_run):
        """``read(client, index)`` of each key of an index shared by every queue (see
        indexes), through each_key; at most ``limit`` entries in all. An index holding
        something else than a sorted set (someone else wrote it) reads as empty: it is derived
        data, shared by every queue, and left broken it would hide every queue's due tasks or
        lapsed leases for good, so it is deleted (not in a dry run), with an error logged, and
        the sweep builds it again."""
        indexes = self.indexes(index_of)
        found: list[Any] = []
        for index, reply in zip(indexes, self.each_key(indexes, read), strict=True):
            if isinstance(reply, redis.ResponseError):
                if not str(reply).startswith("WRONGTYPE"):
                    raise reply
                self.broken_index(index, mend=not dry_run)
            else:
                found += reply or []
        return found[:limit]

    def each_key(self, keys: list[str], read: Callable[[Any, str], Any]) -> list[Any]:
        """``read(client, key)`` for each key, in order, a refused one as its ResponseError
        (ClusterProtocol sends them in one pipeline)."""
        replies = []
        for key in keys:
            try:
                replies.append(read(self.redis, key))
            except redis.ResponseError as exc:
                replies.append(exc)
        return replies

    def indexes(self, index_of: Callable[[str], str]) -> list[str]:
        """An index shared by every queue, as the list of its keys: the one key, or in
        cluster mode one per queue of the queues set."""
        if not self.keys.cluster:
            return [index_of("")]
        return [index_of(queue) for queue in self.queue_window(0, 0)]

    def broken_index(self, index, mend):
        """Log an index that holds something else than a sorted set; with ``mend``, delete
        it."""
        kind = self.redis.type(index)
        if kind in ("zset", "none"):
            return  # mended meanwhile
        logger.error("index %s holds a %s, not a sorted set (not written by django_blueque)%s",
                     index, kind, ": deleted; the sweep builds it again" if mend else "")
        if mend:
            self.redis.delete(index)

    def expire_finished(self, queue: str, status: str, default_retention: float | None = None,
                        batch: int = EXPIRY_WINDOW, dry_run: bool = False) -> int:
        """Delete (or with ``dry_run`` count) the tasks past their retention among the
        ``batch`` oldest of a finished list (see expire_finished.lua)."""
        return self.script("expire_finished")(
            keys=[self.keys.finished(queue, status), self.keys.expiring_queues(queue),
                  self.keys.error_types(queue)],
            args=[self._task_prefix, f"{status} {queue}", _optional(default_retention), batch,
                  "1" if dry_run else "0",
                  self.keys.failed_of_type(queue, "") if status == k.FAILED else ""])

    def expiring_lists(self, limit: int, dry_run: bool = False) -> list[tuple[str, str]]:
        """``[(status, queue)]`` of the expiring index whose earliest expiry has come."""
        entries = self._come(self.keys.expiring_queues, limit, dry_run)
        return [tuple(entry.split(" ", 1)) for entry in entries if " " in entry]

    def lapsed_leases(self, limit: int = LAPSED_BATCH, dry_run: bool = False
                      ) -> list[tuple[str, str, str, str, str]]:
        """``[(task id, queue, listener id, pid, token)]`` of the lease index whose lease
        has lapsed (see lapsed_leases.lua, which also tidies the index)."""
        return [tuple(entry) for entry in self._each_index(
            self.keys.lease_expiries, limit, lambda client, index: self.script("lapsed_leases")(
                keys=[index], args=[self._task_prefix, self.keys.lease(""), limit,
                                    "1" if dry_run else "0"], client=client), dry_run)]

    def lapsed_listeners(self, limit: int = LAPSED_BATCH, dry_run: bool = False
                         ) -> list[tuple[str, str, float | None]]:
        """``[(queue, listener id, heartbeat expiry or None)]`` of the listener index whose
        heartbeat has lapsed (see lapsed_listeners.lua, which also tidies the index)."""
        (listeners, after), leases = (self.keys.around(self.keys.listeners),
                                      self.keys.around(self.keys.listener_leases)[0])
        return [(queue, listener, float(expiry) if expiry else None)
                for queue, listener, expiry in self._each_index(
                    self.keys.listener_expiries, limit, lambda client, index: self.script(
                        "lapsed_listeners")(keys=[index], args=[
                            listeners, leases, limit, "1" if dry_run else "0", after],
                                            client=client), dry_run)]

    def index_queues(self, queues: Iterable[str],
                     retention: Callable[[str], float | None] | None = None) -> int:
        """The sweep's upkeep of the due and expiring indexes for ``queues`` (see
        index_queues.lua); ``retention``: ``queue -> default seconds or None``."""
        groups = {group[0]: group for group in self.slot_groups(list(queues))}

        def index(client, first):
            keys = [self.keys.due_queues(first), self.keys.expiring_queues(first)]
            args: list[str | float] = [self._task_prefix]
            for queue in groups[first]:
                keys += [self.keys.scheduled(queue), self.keys.complete(queue),
                         self.keys.failed(queue)]
                args += [queue, _optional(retention(queue) if retention else None)]
            return self.script("index_queues")(keys=keys, args=args, client=client)

        written = 0
        for reply in self.each_key(list(groups), index):
            if isinstance(reply, Exception):
                raise reply
            written += reply or 0
        return written

    def queue_window(self, start: int, size: int) -> list[str]:
        """``size`` names of the queues set from rank ``start`` (the sweep's window); every
        name from ``start`` with size 0."""
        return cast("list[str]", self.redis.zrange(self.keys.queues, start, start + size - 1))

    def forget_started(self, queue: str, member: str) -> None:
        """Drop a started-set member whose task hash is gone."""
        self.redis.srem(self.keys.started(queue), member)

    def server_clock(self, probe_writes: bool = True) -> tuple[float, float]:
        """``(Redis's time in seconds, seconds since Redis started)``, once Redis has taken a
        write (raises otherwise; ``probe_writes=False`` writes nothing): leases are judged on
        Redis's clock, and only while Redis takes the writes that renew them (see
        maintenance.Reaper)."""
        server = self.redis
        if isinstance(server, RedisCluster):  # the clock of the node holding reaper_clock
            server = server.get_node_from_key(self.keys.reaper_clock).redis_connection
        with server.pipeline(transaction=False) as pipe:
            if probe_writes:
                pipe.set(self.keys.reaper_clock, encode_time(now()), px=60_000)
            pipe.time()
            pipe.info("server")
            *_, (seconds, micros), info = pipe.execute()
        return seconds + micros / 1e6, float(info.get("uptime_in_seconds", 0))
