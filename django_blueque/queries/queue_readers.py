"""Readers of queues: which queues there are (a page, a search), the dashboard and the metrics,
one queue's tasks of one state, and the bulk jobs running on a list."""

import math

import redis

from ..conf import get_settings
from ..core import keys as k
from ..core.bulk import BULK_ACTIONS, bulk_job_id
from ..core.values import finite_number
from ..registry import registered_tasks
from ..rows import (
    BulkJob,
    ListenerRow,
    Overview,
    QueueStats,
    frequent_errors,
    throughput,
    throughput_hours,
)
from ..services import next_periodic_runs
from .base import ReaderBase

ROW_FIELDS = ("status", "queue", "created", "updated", "eta", "node", "pid", "progress",
              "progress_message", "attempts", "retries", "parameters", "error", "error_type",
              "started", "finished", "cancel_requested", "priority")

QUEUES_PER_PAGE = 100
"""Queues on one dashboard page (and one ``bq_status`` page)."""
ERROR_TYPES_SHOWN = 20
"""Most error types the failed list offers to filter by (those that failed last first)."""
PRIORITIZED_READ = 100
"""The oldest pending task of a queue is looked for among the oldest of its list and this many
of its tasks with a priority, those that run first (a page of 1,000 queues reads no more)."""
METRICS_QUEUES = 1000
"""Most queues the metrics report (those with the most listeners first, as ranked in
blueque_queues), plus the registered ones; the total is reported beside them."""
SEARCH_CALLS = 100
"""A queue search reads blueque_queues in at most this many ZSCAN calls of ~1,000 names."""
STARTED_READ = 1000
"""A started set bigger than this is listed from a sample (one SSCAN call), not read whole."""


def first_pending(prioritized):
    """The id that became pending first among ``prioritized`` ([(id, score)] of a queue's
    tasks with a priority), or None. A score is ``-priority * 1e13`` plus the queue's pending
    sequence number at the time, negated for a task put back at the head (make_pending in
    common.lib): its size, whatever the priority, orders them in time."""
    def sequence(score):
        if not math.isfinite(score):  # not ours: written by someone else
            return math.inf
        return abs(score - round(score / 1e13) * 1e13)
    return min(prioritized, key=lambda entry: sequence(entry[1]))[0] if prioritized else None


def _counts(replies, held):
    scheduled, pending, started, complete, failed = replies
    # started tasks stay in their listener's reserved list until they end (as in blueque 1.0)
    return {k.SCHEDULED: scheduled, k.PENDING: pending,
            k.RESERVED: max(0, held - started), k.STARTED: started,
            k.COMPLETE: complete, k.FAILED: failed}


def _glob(text):
    """``text`` as a literal inside a Redis MATCH pattern."""
    return "".join("\\" + char if char in "*?[]\\" else char for char in text)


class QueueReaders(ReaderBase):
    """The queries of the dashboard, the metrics, a queue's page and a bulk job's page."""

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
        jobs, last hour's throughput, tasks held for their concurrency key and limits (this
        site's settings), and the periodic tasks: four round trips (five while bulk jobs run:
        their records, found in the set of running jobs)."""
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
            calls += [("hgetall", keys.throughput(queue, hour)) for hour in hours]
            calls += [("zrange", keys.prioritized(queue), 0, PRIORITIZED_READ - 1),
                      ("zcard", keys.prioritized(queue)), ("zcard", keys.waiting_tasks(queue)),
                      ("zcard", keys.held(queue))]
        calls += [("get", keys.periodic(task.queue)) for task, _next in periodic]
        running = sorted({keys.bulk_running(queue) for queue in queues})  # 1 but in cluster mode
        calls += [("smembers", key) for key in running]
        replies = self.read(calls)
        jobs = self._running_jobs(queues, set().union(*replies[len(replies) - len(running):]))
        del replies[len(replies) - len(running):]
        jobs_end = 8
        width = jobs_end + len(hours) + 4
        tasks, conf = registered_tasks(), get_settings()
        stats, oldest = [], {}
        for index, queue in enumerate(queues):
            part = replies[index * width:(index + 1) * width]
            members, leases = part[5], dict(part[6])
            oldest[queue] = [task_id for task_id in (part[7], first_pending(part[-4]))
                             if task_id]
            listeners = [ListenerRow(member, queue, leases.get(member), self.now)
                         for member in sorted(members)]
            task = tasks.get(queue)
            counts = list(part[:5])
            counts[1] += part[-3]  # pending: the list's and the prioritized set's
            ended = part[jobs_end:-4]
            stats.append(QueueStats(queue, names[queue] is not None, counts,
                                    task.name if task else None, None, listeners,
                                    jobs.get(queue, []),
                                    self.now, throughput(self.now, ended),
                                    frequent_errors(self.now, ended),
                                    waiting=part[-2], held=part[-1],
                                    limits=conf.admission(queue)))
        last_runs = replies[len(queues) * width:]
        self._fill_listeners(stats, oldest)
        # plain values: a template calls what is callable, and a task is
        return Overview(self.now, stats, [
            {"name": task.name, "queue": task.queue, "cron": task.periodic.cron,
             "interval": task.periodic.interval, "next": next_run, "last": finite_number(last)}
            for (task, next_run), last in zip(periodic, last_runs, strict=True)],
            total, min(page, pages), pages, search, searched_all, self.unreadable)

    def _running_jobs(self, queues, running):
        """{queue: [BulkJob]} of the running bulk jobs of ``queues``, read in one round trip
        (none when ``running``, the set of running job ids, names none of them)."""
        wanted = [(action, state, queue) for queue in queues for action, state in BULK_ACTIONS
                  if bulk_job_id(action, state, queue) in running]
        if not wanted:
            return {}
        found = {}
        for (action, state, queue), fields in zip(wanted, self.read(
                [("hgetall", self.keys.bulk_job(bulk_job_id(*job))) for job in wanted]),
                strict=True):
            if fields.get("status") == "running":
                found.setdefault(queue, []).append(BulkJob(action, state, queue, fields))
        return found

    def _fill_listeners(self, stats, oldest):
        """Second step of the overview: reserved counts, listener info, oldest pending time
        (``oldest``: queue -> the ids of its candidates, the oldest of its list and of its
        tasks with a priority)."""
        infos = sorted({listener.id for queue in stats for listener in queue.listeners})
        calls = []
        for queue in stats:
            calls += [("llen", self.keys.reserved(queue.name, listener.id))
                      for listener in queue.listeners]
            calls += [("hmget", self.keys.task(task_id), "updated", "created")
                      for task_id in oldest[queue.name]]
        calls += [("hgetall", self.keys.listener_info(listener_id)) for listener_id in infos]
        replies = iter(self.read(calls))
        for queue in stats:
            held = 0
            for listener in queue.listeners:
                listener.held = next(replies)
                held += listener.held
            # the time it became pending (enqueued, retried, moved from the schedule)
            since = [finite_number(updated) or finite_number(created)
                     for updated, created in (next(replies) for _ in oldest[queue.name])]
            queue.oldest_pending = min((time for time in since if time is not None),
                                       default=None)
            queue.counts = _counts(queue.counts, held)
        info = {listener_id: next(replies) for listener_id in infos}
        for queue in stats:
            for listener in queue.listeners:
                listener.info = info[listener.id]

    # -- a queue's tasks of one state ---------------------------------------------------------

    def queue_page(self, queue, state, page, per_page, error_type=None):
        """The counts of one queue and one page of its tasks of ``state``, newest first.
        Returns None for a queue nobody knows. Pending, complete and failed are lists (a
        window of each); scheduled a sorted set by eta (latest first); reserved the
        concatenated reserved lists of its listeners; started a set, read whole up to
        STARTED_READ members (it holds the running tasks only) and sorted by start time.
        The failed page also reads the queue's error types (``error_types``: [(type, count)],
        those that failed last first), and with ``error_type`` pages through that type's
        index instead of the failed list (a task the index names that is no longer failed
        with that type, changed by a blueque 1.0 program, is left out of the page)."""
        keys = self.keys
        jobs = [(action, job_state) for action, job_state in BULK_ACTIONS
                if job_state == state]
        calls = [("zscore", keys.queues, queue), ("zcard", keys.scheduled(queue)),
                 ("llen", keys.pending(queue)), ("scard", keys.started(queue)),
                 ("llen", keys.complete(queue)), ("llen", keys.failed(queue)),
                 ("smembers", keys.listeners(queue)), ("zcard", keys.prioritized(queue)),
                 ("zcount", keys.prioritized(queue), "(0", "+inf")]
        calls += [("hgetall", keys.bulk_job(bulk_job_id(action, job_state, queue)))
                  for action, job_state in jobs]
        failed_page = state == k.FAILED
        if failed_page:
            calls.append(("zrevrange", keys.error_types(queue), 0, ERROR_TYPES_SHOWN - 1))
        first = self.read(calls)
        types = first.pop() if failed_page else []
        score, counts, members = first[0], first[1:6], sorted(first[6])
        listed, prioritized, below = counts[1], first[7], first[8]  # below: priority < 0
        counts[1] += prioritized
        jobs = [BulkJob(action, job_state, queue, fields)
                for (action, job_state), fields in zip(jobs, first[9:], strict=True)
                if fields.get("status") == "running"]
        if score is None and queue not in registered_tasks() and not any(counts):
            return None
        started, sampled = [], False
        if state == k.STARTED:
            started, sampled = self._started(queue, counts[2])
        second = self.read([("llen", keys.reserved(queue, listener_id))
                            for listener_id in members] +
                           [("hget", keys.task(task_id), "started")
                            for _listener, _pid, task_id in started] +
                           [("zcard", keys.failed_of_type(queue, name)) for name in types])
        type_counts = second[len(second) - len(types):]
        error_types = [(name, count) for name, count in zip(types, type_counts, strict=True)
                       if count]
        lengths = second[:len(members)]
        counts = _counts(counts, sum(lengths))
        if state == k.RESERVED:
            total = sum(lengths)
        elif state == k.STARTED:
            total = len(started)
        elif failed_page and error_type is not None:
            total = dict(error_types).get(error_type) or self.read(
                [("zcard", keys.failed_of_type(queue, error_type))])[0]
        else:
            total = counts[state]
        pages = max(1, math.ceil(total / per_page))
        page = min(page, pages)
        start, stop = (page - 1) * per_page, page * per_page - 1
        if state == k.PENDING:
            tasks = self._pending_window(queue, listed, prioritized, below, start, stop)
        elif failed_page and error_type is not None:
            tasks = [task for task in self._window(
                keys.failed_of_type(queue, error_type), "zset", start, stop, ROW_FIELDS)
                if task.status == k.FAILED and (task.error_type or "") == error_type
            ] if total else []
        elif state in (k.COMPLETE, k.FAILED, k.SCHEDULED):
            key = keys.scheduled(queue) if state == k.SCHEDULED else keys.finished(queue, state)
            kind = "zset" if state == k.SCHEDULED else "list"
            tasks = self._window(key, kind, start, stop, ROW_FIELDS) if total else []
        else:
            if state == k.STARTED:
                times = second[len(members):]
                order = sorted(zip(times, started, strict=True),
                               key=lambda pair: finite_number(pair[0]) or 0.0, reverse=True)
                ids = [task_id for _time, (_l, _p, task_id) in order[start:stop + 1]]
            else:
                ids = self._reserved_window(queue, members, lengths, start, stop)
            tasks = self._window(None, "ids", 0, 0, ROW_FIELDS, ids) if ids else []
        return {"counts": counts, "total": total, "page": page, "pages": pages,
                "per_page": per_page, "tasks": tasks, "known": score is not None,
                "jobs": jobs, "sampled": sampled, "unreadable": self.unreadable,
                "error_types": error_types}

    def finished_window(self, queue, state, limit, below=None, error_type=None):
        """Up to ``limit`` tasks of a queue's complete or failed list (or, with
        ``error_type``, of that type's failed-by-type index), newest first, counted by their
        position from the oldest end: the ``limit`` newest below position ``below`` (None:
        the newest of all). Tasks added meanwhile do not move a position, so paging on with
        the next one neither repeats nor skips a task because of them. Returns None for a
        queue nobody knows, else (tasks, total, next position or None)."""
        keys = self.keys
        if error_type is None:
            key, kind, count = keys.finished(queue, state), "list", "llen"
        else:
            key, kind, count = keys.failed_of_type(queue, error_type), "zset", "zcard"
        score, total = self.read([("zscore", keys.queues, queue), (count, key)])
        if score is None and not total and queue not in registered_tasks():
            return None
        top = total - 1 if below is None else min(below, total) - 1
        if top < 0:
            return [], total, None
        bottom = max(top - limit + 1, 0)
        tasks = self._window(key, kind, -(top + 1), -(bottom + 1), ROW_FIELDS)
        if error_type is not None:  # changed by a blueque 1.0 program since it was indexed
            tasks = [task for task in tasks
                     if task.status == k.FAILED and (task.error_type or "") == error_type]
        return tasks, total, bottom or None

    def _pending_window(self, queue, listed, prioritized, below, start, stop):
        """Pending tasks ``start..stop`` in the reverse of the order they will be taken
        (newest first, as the other lists): those with a priority under 0, then the pending
        list, then those with a priority over 0 (see reserve.lua)."""
        segments = [(self.keys.prioritized(queue), "zset", 0, below),
                    (self.keys.pending(queue), "list", 0, listed),
                    (self.keys.prioritized(queue), "zset", below, prioritized)]
        tasks, offset = [], 0
        for key, kind, first, end in segments:
            size = end - first
            low, high = max(start - offset, 0), min(stop - offset, size - 1)
            if low <= high:
                tasks += self._window(key, kind, first + low, first + high, ROW_FIELDS)
            offset += size
        return tasks

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

    # -- bulk jobs -------------------------------------------------------------------------------

    def bulk_job(self, action, state, queue):
        fields, = self.read([("hgetall", self.keys.bulk_job(bulk_job_id(action, state, queue)))])
        return BulkJob(action, state, queue, fields) if fields else None
