"""Read-only Redis queries behind the admin pages, the metrics and ``bq_status``.

Every page reads in a fixed number of round trips (at most four pipelines or script calls),
and only what it shows: counts are LLEN / ZCARD / SCARD, lists are windows read with their
tasks' fields by one script (long values cut to a preview), a task page reads its hash through
a script that cuts it to what the page shows. Nothing here scans the keyspace or reads a whole
list; what grows with stored data is bounded (see QUEUES_PER_PAGE, METRICS_QUEUES,
LISTENER_QUEUES, STARTED_READ).

Data someone else wrote may be of the wrong type: every read goes through ``Reader.read``,
which turns a failed reply into the empty value and notes the key in ``Reader.unreadable``,
so a page shows what it can and says what it could not read.
"""

import math
import time

import redis

from .actions import BULK_ACTIONS, bulk_job_id
from .core import keys as k
from .core.client import Task
from .registry import registered_tasks
from .rows import (
    BulkJob,
    Listener,
    Overview,
    QueueStats,
    number,
    throughput,
    throughput_hours,
)
from .worker import next_periodic_runs

MAX_NAME = 512
"""Longest task id or queue name a page accepts; longer ones are a 404 (no key is that long)."""

PREVIEW_BYTES = 160
ROW_FIELDS = ("status", "queue", "created", "updated", "eta", "node", "pid", "progress",
              "progress_message", "attempts", "retries", "parameters", "error", "error_type",
              "started", "finished", "cancel_requested")
HELD_FIELDS = ("status", "parameters", "progress", "progress_message", "started", "updated")
MAX_HELD = 100
"""Most reserved tasks listed per listener (a listener holds at most its concurrency)."""

QUEUES_PER_PAGE = 100
"""Queues on one dashboard page (and one ``bq_status`` page)."""
METRICS_QUEUES = 1000
"""Most queues the metrics report (those with the most listeners first, as ranked in
blueque_queues), plus the registered ones; the total is reported beside them."""
LISTENER_QUEUES = 1000
"""Most queues the listeners page reads: those blueque_queues counts listeners on (its score,
which blueque 1.0's and our listeners raise by one each), plus the registered ones."""
SEARCH_CALLS = 100
"""A queue search reads blueque_queues in at most this many ZSCAN calls of ~1,000 names."""
STARTED_READ = 1000
"""A started set bigger than this is listed from a sample (one SSCAN call), not read whole."""

TEXT_FIELDS = ("parameters", "result", "error", "traceback", "last_error")
TEXT_BYTES = 1_000_000
"""A long text field (parameters, result, error...) is cut past this many bytes on its page."""
FIELD_BYTES = 2000
"""Any other field is cut past this many bytes on the task page."""
MORE_FIELDS = 100
"""Fields outside the protocol's shown on a task page at most (a sample when there are more)."""

_EMPTY = {"llen": 0, "zcard": 0, "scard": 0, "smembers": set(), "zrange": [], "zrevrange": [],
          "zrevrangebyscore": [], "lindex": None, "hgetall": {}, "lrange": [], "hget": None,
          "zscore": None, "get": None, "sismember": 0, "pttl": -2, "exists": 0, "sscan": (0, [])}


def valid_name(value):
    """A task id or queue name that can be looked up (else the page is a 404)."""
    return k.valid_name(value) and len(value) <= MAX_NAME


def _counts(replies, held):
    scheduled, pending, started, complete, failed = replies
    # started tasks stay in their listener's reserved list until they end (as in blueque 1.0)
    return {k.SCHEDULED: scheduled, k.PENDING: pending,
            k.RESERVED: max(0, held - started), k.STARTED: started,
            k.COMPLETE: complete, k.FAILED: failed}


def _glob(text):
    """``text`` as a literal inside a Redis MATCH pattern."""
    return "".join("\\" + char if char in "*?[]\\" else char for char in text)


class Reader:
    """The queries for one request, on the configured client."""

    def __init__(self, client):
        self.client = client
        self.keys = client.keys
        self.db = client.redis  # decodes invalid UTF-8 as U+FFFD: a page never 500s on it
        self.now = time.time()
        self.unreadable = {}
        """{key: why}: keys whose type is not the protocol's, read as empty."""

    def read(self, calls):
        """Run ``calls`` ((command, key, *args) each) in one pipeline. A failed reply (a key
        of the wrong type) becomes the command's empty value and is noted in unreadable."""
        with self.db.pipeline(transaction=False) as pipe:
            for command, key, *args in calls:
                if command == "zrange":
                    pipe.zrange(key, *args, withscores=True)
                else:
                    getattr(pipe, command)(key, *args)
            replies = pipe.execute(raise_on_error=False)
        out = []
        for (command, key, *args), reply in zip(calls, replies, strict=True):
            if isinstance(reply, redis.ResponseError):
                self.unreadable.setdefault(key, str(reply).split(":")[-1].strip())
                reply = [None] * (len(args)) if command == "hmget" else _EMPTY[command]
            out.append(reply)
        return out

    def _window(self, key, kind, start, stop, fields, task_ids=()):
        """Protocol.window as Task objects; a task key that is not a hash is noted."""
        tasks = []
        for task_id, score, values in self.client.protocol.window(
                key, kind, start, stop, fields, PREVIEW_BYTES, task_ids, redis_client=self.db):
            if values is None:
                self.unreadable.setdefault(self.keys.task(task_id), "not a hash")
                values = {}
            task = Task(task_id, {name: value for name, value in values.items()
                                  if value is not None})
            task.score = number(score)
            tasks.append(task)
        return tasks

    # -- which queues ------------------------------------------------------------------------

    def queue_names(self, page=1, search="", per_page=QUEUES_PER_PAGE):
        """One page of queue names: ``({queue: listeners score or None}, total, pages,
        searched all)``. Registered queues come first on page 1; the others in the order of
        blueque_queues, most listeners first. A search finds a name equal to ``search``, then
        names holding it, reading at most SEARCH_CALLS * ~1,000 names."""
        queues = self.keys.queues
        registered = sorted(registered_tasks())
        if search:
            return self._search(search, registered, per_page)
        total, = self.read([("zcard", queues)])
        pinned = registered if page == 1 else []
        start = (page - 1) * per_page
        ranked, = self.read([("zrevrange", queues, start, start + per_page - 1, True)])
        names = {name: score for name, score in ranked}
        names.update({name: names.get(name) for name in pinned})
        pages = max(1, math.ceil(total / per_page))
        return names, max(total, len(names)), pages, True

    def _search(self, search, registered, per_page):
        exact, = self.read([("zscore", self.keys.queues, search)])
        names = {search: exact} if exact is not None else {}
        names.update({name: None for name in registered if search in name})
        cursor, calls = 0, 0
        while len(names) < per_page and calls < SEARCH_CALLS:
            cursor, found = self._zscan(cursor, search)
            calls += 1
            for name, score in found:
                names.setdefault(name, score)
            if not cursor:
                break
        return dict(list(names.items())[:per_page]), len(names), 1, not cursor or (
            len(names) >= per_page)

    def _zscan(self, cursor, search):
        try:
            return self.db.zscan(self.keys.queues, cursor, match=f"*{_glob(search)}*",
                                 count=1000)
        except redis.ResponseError as exc:
            self.unreadable.setdefault(self.keys.queues, str(exc).split(":")[-1].strip())
            return 0, []

    # -- the dashboard, the metrics ---------------------------------------------------------

    def overview(self, page=1, search="", per_page=QUEUES_PER_PAGE):
        """One page of queues with their counts, listeners, oldest pending task, running bulk
        jobs and last hour's throughput, and the periodic tasks: four round trips."""
        names, total, pages, searched_all = self.queue_names(page, search, per_page)
        queues = sorted(names)
        periodic = next_periodic_runs(self.now)
        keys, calls = self.keys, []
        hours = throughput_hours(self.now)
        for queue in queues:
            calls += [("zcard", keys.scheduled(queue)), ("llen", keys.pending(queue)),
                      ("scard", keys.started(queue)), ("llen", keys.complete(queue)),
                      ("llen", keys.failed(queue)), ("smembers", keys.listeners(queue)),
                      ("zrange", keys.listener_leases(queue), 0, -1),
                      ("lindex", keys.pending(queue), -1)]
            calls += [("hgetall", keys.bulk_job(bulk_job_id(action, state, queue)))
                      for action, state in BULK_ACTIONS]
            calls += [("hgetall", keys.throughput(queue, hour)) for hour in hours]
        calls += [("get", keys.periodic(task.queue)) for task, _next in periodic]
        replies = self.read(calls)
        jobs_end = 8 + len(BULK_ACTIONS)
        width = jobs_end + len(hours)
        tasks = registered_tasks()
        stats = []
        for index, queue in enumerate(queues):
            part = replies[index * width:(index + 1) * width]
            members, leases, oldest = part[5], dict(part[6]), part[7] or None
            listeners = [Listener(member, queue, leases.get(member), self.now)
                         for member in sorted(members)]
            jobs = [BulkJob(action, state, queue, fields)
                    for (action, state), fields in zip(BULK_ACTIONS, part[8:jobs_end],
                                                       strict=True)
                    if fields.get("status") == "running"]
            task = tasks.get(queue)
            stats.append(QueueStats(queue, names[queue] is not None, list(part[:5]),
                                    task.name if task else None, oldest, listeners, jobs,
                                    self.now, throughput(self.now, part[jobs_end:])))
        last_runs = replies[len(queues) * width:]
        self._fill_listeners(stats)
        # plain values: a template calls what is callable, and a task is
        return Overview(self.now, stats, [
            {"name": task.name, "queue": task.queue, "cron": task.periodic.cron,
             "interval": task.periodic.interval, "next": next_run, "last": number(last)}
            for (task, next_run), last in zip(periodic, last_runs, strict=True)],
            total, min(page, pages), pages, search, searched_all, self.unreadable)

    def _fill_listeners(self, stats):
        """Second step of the overview: reserved counts, listener info, oldest pending time."""
        infos = sorted({listener.id for queue in stats for listener in queue.listeners})
        calls = []
        for queue in stats:
            calls += [("llen", self.keys.reserved(queue.name, listener.id))
                      for listener in queue.listeners]
            if queue.oldest_pending:
                calls.append(("hmget", self.keys.task(queue.oldest_pending), "updated",
                              "created"))
        calls += [("hgetall", self.keys.listener_info(listener_id)) for listener_id in infos]
        replies = iter(self.read(calls))
        for queue in stats:
            held = 0
            for listener in queue.listeners:
                listener.held = next(replies)
                held += listener.held
            if queue.oldest_pending:
                # the time it became pending (enqueued, retried, moved from the schedule)
                updated, created = next(replies)
                queue.oldest_pending = number(updated) or number(created)
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
        concatenated reserved lists of its listeners; started a set, read whole up to
        STARTED_READ members (it holds the running tasks only) and sorted by start time."""
        keys = self.keys
        jobs = [(action, job_state) for action, job_state in BULK_ACTIONS
                if job_state == state]
        calls = [("zscore", keys.queues, queue), ("zcard", keys.scheduled(queue)),
                 ("llen", keys.pending(queue)), ("scard", keys.started(queue)),
                 ("llen", keys.complete(queue)), ("llen", keys.failed(queue)),
                 ("smembers", keys.listeners(queue))]
        calls += [("hgetall", keys.bulk_job(bulk_job_id(action, job_state, queue)))
                  for action, job_state in jobs]
        first = self.read(calls)
        score, counts, members = first[0], first[1:6], sorted(first[6])
        jobs = [BulkJob(action, job_state, queue, fields)
                for (action, job_state), fields in zip(jobs, first[7:], strict=True)
                if fields.get("status") == "running"]
        if score is None and queue not in registered_tasks() and not any(counts):
            return None
        started, sampled = [], False
        if state == k.STARTED:
            started, sampled = self._started(queue, counts[2])
        second = self.read([("llen", keys.reserved(queue, listener_id))
                            for listener_id in members] +
                           [("hget", keys.task(task_id), "started")
                            for _listener, _pid, task_id in started])
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
        if state in (k.PENDING, k.COMPLETE, k.FAILED, k.SCHEDULED):
            key = keys.scheduled(queue) if state == k.SCHEDULED else (
                keys.pending(queue) if state == k.PENDING else keys.finished(queue, state))
            kind = "zset" if state == k.SCHEDULED else "list"
            tasks = self._window(key, kind, start, stop, ROW_FIELDS) if total else []
        else:
            if state == k.STARTED:
                times = second[len(members):]
                order = sorted(zip(times, started, strict=True),
                               key=lambda pair: number(pair[0]) or 0.0, reverse=True)
                ids = [task_id for _time, (_l, _p, task_id) in order[start:stop + 1]]
            else:
                ids = self._reserved_window(queue, members, lengths, start, stop)
            tasks = self._window(None, "ids", 0, 0, ROW_FIELDS, ids) if ids else []
        return {"counts": counts, "total": total, "page": page, "pages": pages,
                "per_page": per_page, "tasks": tasks, "known": score is not None,
                "jobs": jobs, "sampled": sampled, "unreadable": self.unreadable}

    def _started(self, queue, size):
        """The parsed members of a started set: all of them, or a sample of about
        STARTED_READ (one SSCAN call) when it is bigger. Returns (members, sampled)."""
        key = self.keys.started(queue)
        if size <= STARTED_READ:
            members, = self.read([("smembers", key)])
        else:
            try:
                members = self.db.sscan(key, 0, count=STARTED_READ)[1]
            except redis.ResponseError:
                members = []
        return [parsed for parsed in map(k.parse_started_member, members) if parsed], (
            size > STARTED_READ)

    def _reserved_window(self, queue, members, lengths, start, stop):
        """Ids ``start..stop`` of the listeners' reserved lists taken one after another."""
        ranges, offset = [], 0
        for listener_id, length in zip(members, lengths, strict=True):
            low, high = max(start, offset), min(stop, offset + length - 1)
            if low <= high:
                ranges.append((listener_id, low - offset, high - offset))
            offset += length
        return [task_id for part in self.read(
            [("lrange", self.keys.reserved(queue, listener_id), low, high)
             for listener_id, low, high in ranges]) for task_id in part]

    # -- one task -------------------------------------------------------------------------------

    def task(self, task_id, text_bytes=TEXT_BYTES):
        """The task's fields as its page shows them (long values cut, at most MORE_FIELDS
        fields outside the protocol; the long texts to ``text_bytes``), whether its lease is
        held, and its node's liveness. None for an unknown task. ``task.cut`` maps a cut field
        to its full length in bytes; ``task.hidden`` counts the fields not shown."""
        others = [name for name in k.PROTOCOL_FIELDS + k.EXTENSION_FIELDS
                  if name not in TEXT_FIELDS]
        peeked = self.client.protocol.peek(task_id, TEXT_FIELDS, others, text_bytes,
                                           FIELD_BYTES, MORE_FIELDS, redis_client=self.db)
        if peeked is None:
            return None
        if isinstance(peeked, str):
            self.unreadable[self.keys.task(task_id)] = f"a {peeked}, not a hash"
            task = Task(task_id, {})
            task.cut, task.hidden, task.lease_ttl, task.node_listener = {}, 0, None, None
            return task
        size, fields = peeked
        task = Task(task_id, {name: value for name, (value, _length) in fields.items()})
        task.cut = {name: length for name, (value, length) in fields.items()
                    if length > len(value.encode())}
        task.hidden = size - len(fields)
        lease_ttl, = self.read([("pttl", self.keys.lease(task_id))])
        task.lease_ttl = lease_ttl / 1000 if lease_ttl and lease_ttl > 0 else None
        task.node_listener = None
        queue, node = task.fields.get("queue"), task.fields.get("node")
        if queue and node and k.valid_name(queue) and node not in task.cut:
            member, expires, info = self.read([
                ("sismember", self.keys.listeners(queue), node),
                ("zscore", self.keys.listener_leases(queue), node),
                ("hgetall", self.keys.listener_info(node))])
            if member or expires is not None:
                task.node_listener = Listener(node, queue, expires, self.now, info)
        return task

    def task_progress(self, task_id):
        """What a task page refreshes: status, progress and its message, updated."""
        status, progress, message, updated = self.read([(
            "hmget", self.keys.task(task_id), "status", "progress", "progress_message",
            "updated")])[0]
        return {"id": task_id, "status": status, "progress": number(progress),
                "message": message, "updated": number(updated)}

    def task_states(self, task_ids):
        """{id: (status, queue)} of several tasks in one round trip (missing: (None, None))."""
        replies = self.read([("hmget", self.keys.task(task_id), "status", "queue")
                             for task_id in task_ids])
        return {task_id: tuple(reply) for task_id, reply in zip(task_ids, replies, strict=True)}

    def length(self, queue, state):
        """Tasks in a queue's complete or failed list."""
        return self.read([("llen", self.keys.finished(queue, state))])[0]

    def exists(self, task_id):
        return bool(self.db.exists(self.keys.task(task_id)))

    # -- listeners --------------------------------------------------------------------------------

    def listener_queues(self):
        """The queues whose listeners the listeners page shows: see LISTENER_QUEUES."""
        ranked, = self.read([("zrevrangebyscore", self.keys.queues, "+inf", "(0", 0,
                              LISTENER_QUEUES)])
        return sorted(set(ranked) | set(registered_tasks()))

    def listeners(self):
        """Every listener of the queues of listener_queues() with the tasks it holds (the
        first MAX_HELD of each): three round trips."""
        queues = self.listener_queues()
        replies = self.read([call for queue in queues for call in (
            ("smembers", self.keys.listeners(queue)),
            ("zrange", self.keys.listener_leases(queue), 0, -1))])
        listeners = []
        for index, queue in enumerate(queues):
            members, leases = replies[2 * index:2 * index + 2]
            leases = dict(leases)
            listeners += [Listener(member, queue, leases.get(member), self.now)
                          for member in sorted(members)]
        infos = sorted({listener.id for listener in listeners})
        replies = self.read(
            [call for listener in listeners for call in (
                ("lrange", self.keys.reserved(listener.queue, listener.id), 0, MAX_HELD - 1),
                ("llen", self.keys.reserved(listener.queue, listener.id)))] +
            [("hgetall", self.keys.listener_info(listener_id)) for listener_id in infos])
        info = dict(zip(infos, replies[2 * len(listeners):], strict=True))
        wanted = [task_id for index in range(len(listeners)) for task_id in replies[2 * index]]
        rows = {task.id: task for task in self._window(None, "ids", 0, 0, HELD_FIELDS,
                                                       wanted)} if wanted else {}
        for index, listener in enumerate(listeners):
            listener.info = info[listener.id]
            listener.held = replies[2 * index + 1]
            held = [rows[task_id] for task_id in replies[2 * index]]
            # a started task stays in its listener's reserved list until it ends
            listener.running = [task for task in held if task.status == k.STARTED]
            listener.reserved = [task for task in held if task.status != k.STARTED]
        return listeners

    def listener_state(self, queue, listener_id):
        """(in the listeners set, heartbeat expiry or None) of one listener of a queue."""
        member, expires = self.read([("sismember", self.keys.listeners(queue), listener_id),
                                     ("zscore", self.keys.listener_leases(queue), listener_id)])
        return bool(member), expires

    # -- bulk jobs -------------------------------------------------------------------------------

    def bulk_job(self, action, state, queue):
        fields, = self.read([("hgetall", self.keys.bulk_job(bulk_job_id(action, state, queue)))])
        return BulkJob(action, state, queue, fields) if fields else None
