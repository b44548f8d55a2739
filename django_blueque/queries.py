"""Read-only Redis queries behind the admin pages.

Every page reads in a fixed number of round trips (at most four pipelines or script calls),
whatever is stored, and only what it shows: counts are LLEN / ZCARD / SCARD, lists are windows
read with their tasks' fields by one script (long values cut to a preview), a task page reads
one hash. Nothing here scans the keyspace or reads a whole list; the sets read whole (queues,
listeners, started) grow with queues, listeners and running tasks, never with stored tasks.
"""

import json
import math
import time
from dataclasses import dataclass, field

from .actions import BULK_ACTIONS, bulk_job_id
from .core import keys as k
from .core.client import Task
from .core.protocol import HEARTBEAT_TTL
from .registry import registered_tasks
from .worker import next_periodic_runs

STATES = (k.SCHEDULED, k.PENDING, k.RESERVED, k.STARTED, k.COMPLETE, k.FAILED)
MAX_NAME = 512
"""Longest task id or queue name a page accepts; longer ones are a 404 (no key is that long)."""

PREVIEW_BYTES = 160
ROW_FIELDS = ("status", "queue", "created", "updated", "eta", "node", "pid", "progress",
              "progress_message", "attempts", "retries", "parameters", "error", "error_type",
              "started", "finished", "cancel_requested")
HELD_FIELDS = ("status", "parameters", "progress", "progress_message", "started", "updated")
MAX_HELD = 100
"""Most reserved tasks listed per listener (a listener holds at most its concurrency)."""

DISPLAY_CHARS = 1_000_000
"""A field longer than this is shown cut on the task page (the rest stays in Redis)."""

def valid_name(value):
    """A task id or queue name that can be looked up (else the page is a 404)."""
    return k.valid_name(value) and len(value) <= MAX_NAME


def _float(value):
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


@dataclass
class Listener:
    """A listener of one queue, as the listeners set, its heartbeat and its info hash say."""

    id: str
    queue: str
    expires: float | None  # heartbeat expiry; None for a blueque 1.0 listener (no heartbeat)
    now: float
    info: dict = field(default_factory=dict)
    held: int = 0
    reserved: list = field(default_factory=list)
    running: list = field(default_factory=list)

    @property
    def host(self):
        return self.info.get("host") or (k.parse_listener_id(self.id) or (self.id, None))[0]

    @property
    def pid(self):
        return self.info.get("pid") or (k.parse_listener_id(self.id) or (None, None))[1]

    @property
    def kind(self):
        """'live', 'stale' (heartbeat expired: dead, waiting for the reaper) or 'v1'."""
        if self.expires is None:
            return "v1"
        return "live" if self.expires >= self.now else "stale"

    @property
    def beat(self):
        """Time of the last heartbeat: each beat pushes the expiry HEARTBEAT_TTL ahead."""
        if self.expires is not None:
            return self.expires - HEARTBEAT_TTL
        return _float(self.info.get("beat"))

    @property
    def heartbeat_age(self):
        beat = self.beat
        return None if beat is None else max(0.0, self.now - beat)


@dataclass
class BulkJob:
    """A bulk action's progress, as recorded in Redis."""

    action: str
    state: str
    queue: str
    fields: dict

    @property
    def status(self):
        return self.fields.get("status")

    @property
    def running(self):
        return self.status == "running"

    def number(self, name):
        return int(_float(self.fields.get(name)) or 0)

    @property
    def total(self):
        return self.number("total")

    @property
    def processed(self):
        return self.number("processed")

    @property
    def affected(self):
        return self.number("affected")

    @property
    def percent(self):
        return 100.0 if not self.total else min(100.0, 100.0 * self.processed / self.total)

    def as_dict(self):
        return {"action": self.action, "state": self.state, "queue": self.queue,
                "status": self.status, "total": self.total, "processed": self.processed,
                "affected": self.affected, "percent": round(self.percent, 1),
                "user": self.fields.get("user"), "started": _float(self.fields.get("started")),
                "finished": _float(self.fields.get("finished"))}


@dataclass
class QueueStats:
    name: str
    known: bool  # listed in blueque_queues (a registered queue may not be yet)
    counts: dict
    task: str | None = None  # name of the registered task, None for a foreign queue
    oldest_pending: float | None = None  # when the oldest pending task became pending
    listeners: list = field(default_factory=list)
    jobs: list = field(default_factory=list)
    now: float = 0.0

    @property
    def oldest_pending_age(self):
        if self.oldest_pending is None:
            return None
        return max(0.0, self.now - self.oldest_pending)

    def listeners_of(self, kind):
        return [listener for listener in self.listeners if listener.kind == kind]

    @property
    def live(self):
        return self.listeners_of("live")

    @property
    def stale(self):
        return self.listeners_of("stale")

    @property
    def v1(self):
        return self.listeners_of("v1")

    @property
    def count_list(self):
        return [(state, self.counts[state]) for state in STATES]


@dataclass
class Overview:
    now: float
    queues: list
    periodic: list

    @property
    def listeners(self):
        return [listener for queue in self.queues for listener in queue.listeners]


def _count_commands(pipe, keys, queue):
    """LLEN / ZCARD / SCARD of a queue's state keys (reserved is counted from the listeners)."""
    pipe.zcard(keys.scheduled(queue))
    pipe.llen(keys.pending(queue))
    pipe.scard(keys.started(queue))
    pipe.llen(keys.complete(queue))
    pipe.llen(keys.failed(queue))


def _counts(replies, held):
    scheduled, pending, started, complete, failed = replies
    # started tasks stay in their listener's reserved list until they end (as in blueque 1.0)
    return {k.SCHEDULED: scheduled, k.PENDING: pending,
            k.RESERVED: max(0, held - started), k.STARTED: started,
            k.COMPLETE: complete, k.FAILED: failed}


class Reader:
    """The queries for one request, on the configured client."""

    def __init__(self, client):
        self.client = client
        self.keys = client.keys
        self.db = client.redis  # decodes invalid UTF-8 as U+FFFD: a page never 500s on it
        self.now = time.time()

    # -- the dashboard, the metrics ---------------------------------------------------------

    def queue_names(self):
        """{queue: listeners score or None}: blueque_queues plus registered queues."""
        names = dict(self.db.zrange(self.keys.queues, 0, -1, withscores=True))
        for queue in registered_tasks():
            names.setdefault(queue, None)
        return names

    def overview(self):
        """Every queue with its counts, listeners, oldest pending task and running bulk
        jobs, and the periodic tasks: three round trips."""
        names = self.queue_names()
        queues = sorted(names)
        periodic = next_periodic_runs(self.now)
        with self.db.pipeline(transaction=False) as pipe:
            for queue in queues:
                _count_commands(pipe, self.keys, queue)
                pipe.smembers(self.keys.listeners(queue))
                pipe.zrange(self.keys.listener_leases(queue), 0, -1, withscores=True)
                pipe.lindex(self.keys.pending(queue), -1)
                for action, state in BULK_ACTIONS:
                    pipe.hgetall(self.keys.bulk_job(bulk_job_id(action, state, queue)))
            for task, _next in periodic:
                pipe.get(self.keys.periodic(task.queue))
            replies = pipe.execute()
        width = 8 + len(BULK_ACTIONS)
        tasks = registered_tasks()
        stats = []
        for index, queue in enumerate(queues):
            part = replies[index * width:(index + 1) * width]
            members, leases, oldest = part[5], dict(part[6]), part[7]
            listeners = [Listener(member, queue, leases.get(member), self.now)
                         for member in sorted(members)]
            jobs = [BulkJob(action, state, queue, fields)
                    for (action, state), fields in zip(BULK_ACTIONS, part[8:], strict=True)
                    if fields.get("status") == "running"]
            task = tasks.get(queue)
            stats.append(QueueStats(queue, names[queue] is not None, list(part[:5]),
                                    task.name if task else None, oldest, listeners, jobs,
                                    self.now))
        last_runs = replies[len(queues) * width:]
        self._fill_listeners(stats)
        # plain values: a template calls what is callable, and a task is
        return Overview(self.now, stats, [
            {"name": task.name, "queue": task.queue, "cron": task.periodic.cron,
             "interval": task.periodic.interval, "next": next_run, "last": _float(last)}
            for (task, next_run), last in zip(periodic, last_runs, strict=True)])

    def _fill_listeners(self, stats):
        """Second step of the overview: reserved counts, listener info, oldest pending time."""
        infos = sorted({listener.id for queue in stats for listener in queue.listeners})
        with self.db.pipeline(transaction=False) as pipe:
            for queue in stats:
                for listener in queue.listeners:
                    pipe.llen(self.keys.reserved(queue.name, listener.id))
                if queue.oldest_pending:
                    pipe.hmget(self.keys.task(queue.oldest_pending), "updated", "created")
            for listener_id in infos:
                pipe.hgetall(self.keys.listener_info(listener_id))
            replies = iter(pipe.execute())
        for queue in stats:
            held = 0
            for listener in queue.listeners:
                listener.held = next(replies)
                held += listener.held
            if queue.oldest_pending:
                # the time it became pending (enqueued, retried, moved from the schedule)
                updated, created = next(replies)
                queue.oldest_pending = _float(updated) or _float(created)
            queue.counts = _counts(queue.counts, held)
        info = {listener_id: next(replies) for listener_id in infos}
        for queue in stats:
            for listener in queue.listeners:
                listener.info = info[listener.id]

    # -- a queue's tasks of one state ---------------------------------------------------------

    def queue_page(self, queue, state, page, per_page):
        """The counts of one queue and one page of its tasks of ``state``, newest first.
        Returns None for a queue nobody knows. Pending, complete and failed are lists (a
        window of each); scheduled a sorted set by eta (latest first); reserved the
        concatenated reserved lists of its listeners; started a set, read whole (it holds
        the running tasks only) and sorted by start time."""
        keys = self.keys
        with self.db.pipeline(transaction=False) as pipe:
            pipe.zscore(keys.queues, queue)
            _count_commands(pipe, keys, queue)
            pipe.smembers(keys.listeners(queue))
            jobs = [(action, job_state) for action, job_state in BULK_ACTIONS
                    if job_state == state]
            for action, job_state in jobs:
                pipe.hgetall(keys.bulk_job(bulk_job_id(action, job_state, queue)))
            if state == k.STARTED:
                pipe.smembers(keys.started(queue))
            first = pipe.execute()
        score, counts, members = first[0], first[1:6], sorted(first[6])
        jobs = [BulkJob(action, job_state, queue, fields)
                for (action, job_state), fields in zip(jobs, first[7:7 + len(jobs)],
                                                       strict=True)
                if fields.get("status") == "running"]
        if score is None and queue not in registered_tasks() and not any(counts):
            return None
        started = [parsed for parsed in map(k.parse_started_member, first[-1])
                   if parsed] if state == k.STARTED else []
        with self.db.pipeline(transaction=False) as pipe:
            for listener_id in members:
                pipe.llen(keys.reserved(queue, listener_id))
            for _listener, _pid, task_id in started:
                pipe.hget(keys.task(task_id), "started")
            second = pipe.execute()
        lengths = second[:len(members)]
        counts = _counts(counts, sum(lengths))
        if state == k.RESERVED:
            total = sum(lengths)
        elif state == k.STARTED:
            total = len(started)
        else:
            total = counts[state]
        pages = max(1, math.ceil(total / per_page))
        page = min(page, pages)
        start, stop = (page - 1) * per_page, page * per_page - 1
        protocol, fields = self.client.protocol, ROW_FIELDS
        if state in (k.PENDING, k.COMPLETE, k.FAILED, k.SCHEDULED):
            key = keys.scheduled(queue) if state == k.SCHEDULED else (
                keys.pending(queue) if state == k.PENDING else keys.finished(queue, state))
            kind = "zset" if state == k.SCHEDULED else "list"
            rows = protocol.window(key, kind, start, stop, fields, PREVIEW_BYTES,
                                   redis_client=self.db)
        else:
            if state == k.STARTED:
                times = second[len(members):]
                order = sorted(zip(times, started, strict=True),
                               key=lambda pair: _float(pair[0]) or 0.0, reverse=True)
                ids = [task_id for _time, (_l, _p, task_id) in order[start:stop + 1]]
            else:
                ids = self._reserved_window(queue, members, lengths, start, stop)
            rows = protocol.window(None, "ids", 0, 0, fields, PREVIEW_BYTES, ids,
                                   redis_client=self.db) if ids else []
        tasks = []
        for task_id, row_score, values in rows:
            task = Task(task_id, {name: value for name, value in values.items()
                                  if value is not None})
            task.score = _float(row_score)
            tasks.append(task)
        return {"counts": counts, "total": total, "page": page, "pages": pages,
                "per_page": per_page, "tasks": tasks, "known": score is not None,
                "jobs": jobs}

    def _reserved_window(self, queue, members, lengths, start, stop):
        """Ids ``start..stop`` of the listeners' reserved lists taken one after another."""
        ranges, offset = [], 0
        for listener_id, length in zip(members, lengths, strict=True):
            low, high = max(start, offset), min(stop, offset + length - 1)
            if low <= high:
                ranges.append((listener_id, low - offset, high - offset))
            offset += length
        if not ranges:
            return []
        with self.db.pipeline(transaction=False) as pipe:
            for listener_id, low, high in ranges:
                pipe.lrange(self.keys.reserved(queue, listener_id), low, high)
            return [task_id for part in pipe.execute() for task_id in part]

    # -- one task -------------------------------------------------------------------------------

    def task(self, task_id):
        """The task's whole hash, whether its lease is held, and its node's liveness; None
        for an unknown task."""
        with self.db.pipeline(transaction=False) as pipe:
            pipe.hgetall(self.keys.task(task_id))
            pipe.pttl(self.keys.lease(task_id))
            fields, lease_ttl = pipe.execute()
        if not fields:
            return None
        task = Task(task_id, fields)
        task.lease_ttl = lease_ttl / 1000 if lease_ttl and lease_ttl > 0 else None
        task.node_listener = None
        queue, node = fields.get("queue"), fields.get("node")
        if queue and node and k.valid_name(queue):
            with self.db.pipeline(transaction=False) as pipe:
                pipe.sismember(self.keys.listeners(queue), node)
                pipe.zscore(self.keys.listener_leases(queue), node)
                pipe.hgetall(self.keys.listener_info(node))
                member, expires, info = pipe.execute()
            if member or expires is not None:
                task.node_listener = Listener(node, queue, expires, self.now, info)
        return task

    def task_progress(self, task_id):
        """What a task page refreshes: status, progress and its message, updated."""
        status, progress, message, updated = self.db.hmget(
            self.keys.task(task_id), "status", "progress", "progress_message", "updated")
        return {"id": task_id, "status": status, "progress": _float(progress),
                "message": message, "updated": _float(updated)}

    def task_states(self, task_ids):
        """{id: (status, queue)} of several tasks in one round trip (missing: (None, None))."""
        with self.db.pipeline(transaction=False) as pipe:
            for task_id in task_ids:
                pipe.hmget(self.keys.task(task_id), "status", "queue")
            return {task_id: tuple(reply)
                    for task_id, reply in zip(task_ids, pipe.execute(), strict=True)}

    def length(self, queue, state):
        """Tasks in a queue's complete or failed list."""
        return self.db.llen(self.keys.finished(queue, state))

    def exists(self, task_id):
        return bool(self.db.exists(self.keys.task(task_id)))

    # -- listeners --------------------------------------------------------------------------------

    def listeners(self):
        """Every listener of every queue with the tasks it holds: four round trips."""
        queues = sorted(self.queue_names())
        with self.db.pipeline(transaction=False) as pipe:
            for queue in queues:
                pipe.smembers(self.keys.listeners(queue))
                pipe.zrange(self.keys.listener_leases(queue), 0, -1, withscores=True)
                pipe.smembers(self.keys.started(queue))
            replies = pipe.execute()
        listeners, running = [], {}
        for index, queue in enumerate(queues):
            members, leases, started = replies[3 * index:3 * index + 3]
            leases = dict(leases)
            listeners += [Listener(member, queue, leases.get(member), self.now)
                          for member in sorted(members)]
            for parsed in filter(None, map(k.parse_started_member, started)):
                running.setdefault((queue, parsed[0]), []).append(parsed[2])
        infos = sorted({listener.id for listener in listeners})
        with self.db.pipeline(transaction=False) as pipe:
            for listener in listeners:
                pipe.lrange(self.keys.reserved(listener.queue, listener.id), 0, MAX_HELD - 1)
                pipe.llen(self.keys.reserved(listener.queue, listener.id))
            for listener_id in infos:
                pipe.hgetall(self.keys.listener_info(listener_id))
            replies = pipe.execute()
        info = dict(zip(infos, replies[2 * len(listeners):], strict=True))
        wanted = []
        for index, listener in enumerate(listeners):
            listener.info = info[listener.id]
            running_ids = set(running.get((listener.queue, listener.id), ()))
            listener.reserved = [task_id for task_id in replies[2 * index]
                                 if task_id not in running_ids]
            listener.held = replies[2 * index + 1]
            listener.running = sorted(running_ids)
            wanted += listener.running + listener.reserved
        rows = {}
        if wanted:
            rows = {task_id: Task(task_id, {name: value for name, value in values.items()
                                            if value is not None})
                    for task_id, _score, values in self.client.protocol.window(
                        None, "ids", 0, 0, HELD_FIELDS, PREVIEW_BYTES, wanted,
                        redis_client=self.db)}
        for listener in listeners:
            listener.running = [rows[task_id] for task_id in listener.running]
            listener.reserved = [rows[task_id] for task_id in listener.reserved]
        return listeners

    def listener_state(self, queue, listener_id):
        """(in the listeners set, heartbeat expiry or None) of one listener of a queue."""
        with self.db.pipeline(transaction=False) as pipe:
            pipe.sismember(self.keys.listeners(queue), listener_id)
            pipe.zscore(self.keys.listener_leases(queue), listener_id)
            member, expires = pipe.execute()
        return bool(member), expires

    # -- bulk jobs -------------------------------------------------------------------------------

    def bulk_job(self, action, state, queue):
        fields = self.db.hgetall(self.keys.bulk_job(bulk_job_id(action, state, queue)))
        return BulkJob(action, state, queue, fields) if fields else None


def pretty(value):
    """A field's text for display: JSON objects and arrays indented, anything else verbatim;
    cut past DISPLAY_CHARS. Returns (text, is_json, characters left out)."""
    if value is None:
        return None, False, 0
    text, is_json = value, False
    if value[:1] in ("{", "[") and len(value) <= DISPLAY_CHARS:
        try:
            decoded = json.loads(value)
        except ValueError:
            pass
        else:
            text, is_json = json.dumps(decoded, indent=2, ensure_ascii=False), True
    if len(text) > DISPLAY_CHARS:
        return text[:DISPLAY_CHARS], is_json, len(text) - DISPLAY_CHARS
    return text, is_json, 0
