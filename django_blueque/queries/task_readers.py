"""Readers of one task (its page, its progress, its state for an action) and of the
listeners with the tasks they hold."""

from ..core import keys as k
from ..core.task import Task
from ..core.values import finite_number
from ..registry import registered_tasks
from ..rows import ListenerRow
from .base import ReaderBase

HELD_FIELDS = ("status", "parameters", "progress", "progress_message", "started", "updated")
MAX_HELD = 100
"""Most reserved tasks listed per listener (a listener holds at most its concurrency)."""

LISTENER_QUEUES = 1000
"""Most queues the listeners page reads: those blueque_queues counts listeners on (its score,
which blueque 1.0's and our listeners raise by one each), plus the registered ones."""

TEXT_FIELDS = ("parameters", "result", "error", "traceback", "last_error", "errors",
               "checkpoint")
TEXT_BYTES = 1_000_000
"""A long text field (parameters, result, error...) is cut past this many bytes on its page."""
FIELD_BYTES = 2000
"""Any other field is cut past this many bytes on the task page."""
MORE_FIELDS = 100
"""Fields outside the protocol's shown on a task page at most (a sample when there are more)."""


class TaskReaders(ReaderBase):
    """The queries of a task's page and of the listeners page."""

    # -- one task -------------------------------------------------------------------------------

    def task(self, task_id, text_bytes=TEXT_BYTES):
        """The task's fields as its page shows them (long values cut, at most MORE_FIELDS
        fields outside the protocol; the long texts to ``text_bytes``), whether its lease is
        held, and its node's liveness. None for an unknown task. ``task.cut`` maps a cut field
        to its full length in bytes; ``task.hidden`` counts the fields not shown."""
        others = [name for name in k.PROTOCOL_FIELDS + k.EXTENSION_FIELDS
                  if name not in TEXT_FIELDS]
        peeked = self.client.protocol.admin.peek(task_id, TEXT_FIELDS, others, text_bytes,
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
                task.node_listener = ListenerRow(node, queue, expires, self.now, info)
        return task

    def task_progress(self, task_id):
        """What a task page refreshes: status, progress and its message, updated."""
        status, progress, message, updated = self.read([(
            "hmget", self.keys.task(task_id), "status", "progress", "progress_message",
            "updated")])[0]
        return {"id": task_id, "status": status, "progress": finite_number(progress),
                "message": message, "updated": finite_number(updated)}

    def task_states(self, task_ids):
        """{id: (status, queue)} of several tasks in one round trip (missing: (None, None))."""
        replies = self.read([("hmget", self.keys.task(task_id), "status", "queue")
                             for task_id in task_ids])
        return {task_id: tuple(reply) for task_id, reply in zip(task_ids, replies, strict=True)}

    def length(self, queue, state):
        """Tasks a bulk job on a queue's ``state`` would walk: its complete or failed list,
        or its pending list and prioritized set."""
        calls = [("llen", self.keys.bulk_list(queue, state))]
        if state == k.PENDING:
            calls.append(("zcard", self.keys.prioritized(queue)))
        return sum(self.read(calls))

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
            listeners += [ListenerRow(member, queue, leases.get(member), self.now)
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
