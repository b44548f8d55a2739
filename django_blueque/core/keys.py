"""Every Redis key and task-hash field of the Blueque protocol, in one place.

Keys are their parts joined with ``_`` after the prefix (``blueque``), exactly as blueque 1.0
builds them. Nothing else in the package builds a key string. The extension keys (heartbeat,
lease, cancel requests, listener info) are additions: a blueque 1.0 reader never looks at them.

Cluster mode (``Keys(cluster=True)``, for Redis Cluster) puts every key of one queue in one hash
slot, so that each step stays one script on one node: the queue's name is written as a hash
tag (``blueque_pending_tasks_{q}``), task ids end with their queue's tag (``<uuid>{q}``), and
each index shared by every queue (due, lease and listener expiries...) is kept per queue, in
the queue's slot. Only the queues set, listener info hashes and the reaper's clock stay single
keys, written apart from the scripts. blueque 1.0 cannot read these names.
"""

import functools
import os
import re
import secrets
import socket
from collections.abc import Callable

DEFAULT_PREFIX = "blueque"

# Task statuses, as blueque 1.0 writes them.
SCHEDULED = "scheduled"
WAITING = "waiting"  # django_blueque's: waits for its dependencies, in no list 1.0 reads
PENDING = "pending"
RESERVED = "reserved"
STARTED = "started"
COMPLETE = "complete"
FAILED = "failed"
STATUSES = (SCHEDULED, PENDING, RESERVED, STARTED, COMPLETE, FAILED)
FINISHED = (COMPLETE, FAILED)

# error_type of a cancelled task (written by cancel.lua, start.lua and the listener); blueque
# before 0.1 wrote the unqualified name, still read as cancelled.
CANCELLED = "django_blueque.Cancelled"
CANCELLED_TYPES = (CANCELLED, "Cancelled")

THROUGHPUT_KEEP = 2 * 3600
"""Seconds a queue's hour of throughput counters is kept (the dashboard shows the last hour)."""

# Task-hash fields of blueque 1.0.
PROTOCOL_FIELDS = (
    "status", "queue", "parameters", "created", "updated", "eta", "node", "pid", "result", "error",
    "reclaimed_node",
)
# Task-hash fields added by django_blueque (documented in the README's protocol section).
EXTENSION_FIELDS = (
    "attempts",          # runs started so far (1 on the first run)
    "retries",           # retries allowed after the first run
    "backoff",           # seconds c of the retry schedule: retry n waits c * 2**(n-1)
    "timeout",           # seconds one run may take before its process is killed
    "retention",         # seconds a finished task is kept before the reaper deletes it
    "lease",             # token of the current reservation; guards every later step
    "started",           # time.time() of the current (or last) run's start
    "finished",          # time.time() of completion or final failure
    "expires",           # finished + retention: when the reaper may delete the task
    "progress",          # percentage 0..100 reported by the running task
    "progress_message",  # free text reported with the progress
    "checkpoint",        # JSON state the running task saved for a later run to resume from
    "checkpoint_at",     # time.time() of that checkpoint
    "usage",             # JSON list of runs' {attempt, peak_memory (bytes), cpu (s), time}
    "error_type",        # exception class of the failure ("builtins.ValueError", "Killed", ...)
    "traceback",         # formatted traceback of the failure
    "last_error",        # error of the previous attempt, kept while a retry is scheduled
    "cancel_requested",  # time.time() a cancellation of a reserved or started task was asked
    "priority",          # -100..100, higher first; a task with one (not 0) waits in `prioritized`
    "unique_key",        # the key no other waiting task of the queue may hold (see `unique`)
    "unique_until",      # 'start' (the key is free once the task starts) or 'end'
    "errors",            # JSON list of every failed run's error, oldest first (values.ErrorEntry)
    "depends_on",        # JSON list of the ids this task waits for, in the order given
    "waiting_for",       # how many of them have not ended yet (0: it may run)
    "allow_failure",     # '1': a dependency that fails counts as ended (else it cancels this one)
    "blocked_by",        # the dependency whose failure cancelled this task (a retry revives it)
    "workflow",          # id of the workflow (chain, group) this task belongs to
    "ended_by",          # '<end id> <outcome>' of the last end a task process recorded
    "concurrency_key",   # tasks sharing it run at most MAX_RUNNING_PER_KEY at once (admission.py)
    "held_since",        # Redis time it was first set aside while its concurrency key was full
    "traceparent",       # W3C trace context of the enqueue (tracing.py), when a span was current
    "tracestate",        # its vendor part, when it has one
)
TRACE_FIELDS = ("traceparent", "tracestate")

UNIQUE_UNTIL = ("start", "end")
"""When a unique task frees its key: when it starts (the default) or when it ends."""

ERRORS_KEPT = 100
"""Most entries a task's ``errors`` list keeps (the oldest go first)."""

PRIORITIES = range(-100, 101)
"""Django's Tasks framework's range of priorities; 0, the default, is blueque 1.0's order."""

_SAFE_NAME = re.compile(r"^[^\s]+$")


def valid_name(name: object, longest: int | None = None) -> bool:
    """A queue name or task id usable in a key: non-empty, no whitespace (started-set members
    are space-separated, so a space would make them ambiguous), and at most ``longest``
    characters when given (the admin's bound on what a page looks up)."""
    return isinstance(name, str) and bool(_SAFE_NAME.match(name)) and (
        longest is None or len(name) <= longest)


def _valid_pid(text: str) -> bool:
    """A pid as written by someone else: ASCII digits, 1 .. 2**31 - 1 (a bigger number makes
    os.kill() raise OverflowError; 0 would mean the caller's own process group)."""
    return text.isascii() and text.isdigit() and len(text) <= 10 and 0 < int(text) < 2**31


@functools.cache
def hostname() -> str:
    """This host's name, the host part of its listeners' ids and of what they report:
    ``socket.getfqdn()``, as blueque 1.0 names its listeners. Cached: getfqdn() may ask DNS,
    which must not be on every heartbeat's way (nor hang it)."""
    return socket.getfqdn()


OUR_LISTENER_MARK = "~"
"""In the host part of the ids of our runners' listeners: ``<host>~<random>_<pid>``."""


def unique_listener_id(host: str, pid: int) -> str:
    """An id unique per process start (hosts named localhost, containers sharing a hostname
    and reusing pids), of the ``<name>_<pid>`` shape blueque 1.0 parses. Its host part never
    equals a blueque 1.0 worker's hostname, so 1.0 never judges it by pid: its heartbeat does."""
    return f"{host}{OUR_LISTENER_MARK}{secrets.token_hex(4)}_{pid}"


def parse_listener_id(listener_id: str) -> tuple[str, int] | None:
    """``(host, pid)`` of a listener id ``<host>_<pid>``, or None if it is malformed."""
    host, sep, pid = listener_id.rpartition("_")
    if not sep or not host or not _valid_pid(pid):
        return None
    return host, int(pid)


def parse_started_member(member: str) -> tuple[str, int, str] | None:
    """``(listener_id, pid, task_id)`` of a started-set member, or None if it is malformed."""
    parts = member.split(" ")
    if len(parts) != 3 or not _valid_pid(parts[1]):
        return None
    return parts[0], int(parts[1]), parts[2]


class Keys:
    """Key names for one prefix, in blueque 1.0's layout or (``cluster``) in cluster mode."""

    def __init__(self, prefix: str = DEFAULT_PREFIX, cluster: bool = False) -> None:
        self.prefix = prefix
        self.cluster = cluster

    def _key(self, *parts: str) -> str:
        return "_".join((self.prefix,) + parts)

    def _q(self, queue: str) -> str:
        """A queue's name as a key part: in cluster mode its hash tag, ``{queue}``."""
        return "{" + queue + "}" if self.cluster else queue

    def _shared(self, name: str, queue: str) -> str:
        """An index shared by every queue; in cluster mode one per queue, in its slot."""
        return self._key(name, self._q(queue)) if self.cluster else self._key(name)

    def around(self, queue_key: Callable[[str], str]) -> tuple[str, str]:
        """``(before, after)`` such that ``before + queue + after`` is ``queue_key(queue)``:
        what a script joins to the queue names it reads from an index."""
        before, _, after = queue_key("\0").partition("\0")
        return before, after

    def check_queue(self, queue: str) -> None:
        """Raise ValueError for a queue name that cannot be a hash tag (cluster mode)."""
        if self.cluster and ("{" in queue or "}" in queue):
            raise ValueError(f"invalid queue name {queue!r}: in cluster mode a queue name is "
                             f"a hash tag, and cannot hold braces")

    def new_task_id(self, queue: str) -> str:
        """A uuid4 string, as blueque 1.0 makes; in cluster mode followed by the queue's tag,
        so that the task's keys share its queue's slot."""
        return self.new_task_ids(queue, 1)[0]

    def new_task_ids(self, queue: str, count: int) -> list[str]:
        """``count`` of new_task_id's ids, from one read of the system's random source, formatted
        in one pass: ``str(uuid.uuid4())`` per id was a third of enqueue_many's client time."""
        raw = bytearray(os.urandom(16 * count))
        raw[6::16] = bytes(byte & 0x0F | 0x40 for byte in raw[6::16])  # version 4
        raw[8::16] = bytes(byte & 0x3F | 0x80 for byte in raw[8::16])  # RFC 4122 variant
        digits = raw.hex()
        tag = self._q(queue) if self.cluster else ""
        return [f"{digits[at:at + 8]}-{digits[at + 8:at + 12]}-{digits[at + 12:at + 16]}-"
                f"{digits[at + 16:at + 20]}-{digits[at + 20:at + 32]}{tag}"
                for at in range(0, 32 * count, 32)]

    def check_task_id(self, queue: str, task_id: str) -> None:
        """Raise ValueError for a task id given by a caller that cannot live in ``queue``
        (cluster mode: it must end with the queue's tag)."""
        if self.cluster and not task_id.endswith(self._q(queue)):
            raise ValueError(f"task id {task_id!r} cannot join queue {queue!r}: in cluster "
                             f"mode a task id ends with its queue's hash tag, {self._q(queue)}")

    def queue_of(self, task_id: str) -> str:
        """The queue a cluster-mode task id names ('' in blueque 1.0's layout, where nothing
        depends on it)."""
        start = task_id.find("{")
        if not self.cluster or start < 0 or not task_id.endswith("}"):
            return ""
        return task_id[start + 1:-1]

    # blueque 1.0 keys
    @property
    def queues(self) -> str:
        """ZSET: every queue's name, scored by its listeners in blueque 1.0's layout. In cluster
        mode, written apart from the scripts: score 0, or 1 once a listener registered (the
        count is in queues_in_slot)."""
        return self._key("queues")

    def queues_in_slot(self, queue: str) -> str:
        """The queues set as a script that counts a queue's listeners sees it: the queues set
        itself, or in cluster mode a set of that queue alone, in its slot."""
        return self._shared("queues", queue)

    def pending(self, queue: str) -> str:
        return self._key("pending_tasks", self._q(queue))

    def scheduled(self, queue: str) -> str:
        return self._key("scheduled_tasks", self._q(queue))

    def reserved(self, queue: str, listener_id: str) -> str:
        return self._key("reserved_tasks", self._q(queue), listener_id)

    def started(self, queue: str) -> str:
        return self._key("started_tasks", self._q(queue))

    def complete(self, queue: str) -> str:
        return self._key("complete_tasks", self._q(queue))

    def failed(self, queue: str) -> str:
        return self._key("failed_tasks", self._q(queue))

    def finished(self, queue: str, status: str) -> str:
        return self.complete(queue) if status == COMPLETE else self.failed(queue)

    def bulk_list(self, queue: str, state: str) -> str:
        """The list a bulk job on a queue's ``state`` walks: its pending, complete or failed
        list."""
        return self.pending(queue) if state == PENDING else self.finished(queue, state)

    def listeners(self, queue: str) -> str:
        return self._key("listeners", self._q(queue))

    def task(self, task_id: str) -> str:
        return self._key("task", task_id)

    # extension keys
    def prioritized(self, queue: str) -> str:
        """ZSET: the pending tasks with a priority, scored so that ZRANGE order is the order
        of taking (common.lib's make_pending). blueque 1.0 never reads it: tasks without a
        priority stay in the pending list, where 1.0 puts them."""
        return self._key("prioritized", self._q(queue))

    def unique(self, queue: str) -> str:
        """HASH: unique key -> id of the task holding it, while it waits (or runs, with
        ``unique_until`` 'end'). An entry whose task no longer holds it is free (enqueue.lua
        checks the task), so a task deleted or run by blueque 1.0 never blocks its key."""
        return self._key("unique", self._q(queue))

    def failed_of_type(self, queue: str, error_type: str) -> str:
        """ZSET index: the failed tasks of a queue whose ``error_type`` is this one -> time
        they failed; what the failed list's filter by error type pages through. Kept by the
        scripts that fail a task or take it out of the failed list (common.lib's
        index_failure); a task that blueque 1.0 failed is not in it."""
        return self._key("failed_of_type", f"{self._q(queue)} {error_type}")

    def error_types(self, queue: str) -> str:
        """ZSET index: each error type with a ``failed_of_type`` index -> time of its newest
        failure (the filter's choices, most recent first)."""
        return self._key("error_types", self._q(queue))

    def priority_sequence(self, queue: str) -> str:
        """STRING: a counter that orders the prioritized tasks of one priority (first in,
        first out)."""
        return self._key("priority_sequence", self._q(queue))

    def priority_wake(self, queue: str) -> str:
        """LIST holding one element while ``prioritized`` has tasks: what a listener's
        blocking peek waits on (a sorted set cannot be peeked at without taking)."""
        return self._key("priority_wake", self._q(queue))

    def full(self, queue: str) -> str:
        """STRING: set while a take found the queue at its MAX_RUNNING (admission.py); the
        end of a run there deletes it and wakes the listeners waiting on ``slot_wake``."""
        return self._key("full", self._q(queue))

    def slot_wake(self, queue: str) -> str:
        """LIST holding one element once a run of a full queue ended: what the blocking peek
        of a listener waiting for a slot there returns on."""
        return self._key("slot_wake", self._q(queue))

    def running_keys(self, queue: str) -> str:
        """ZSET, every score 0: ``"<concurrency key> <id>"`` of each started task of the queue
        that has a key, so a lexical range counts one key's runs."""
        return self._key("running_keys", self._q(queue))

    def held(self, queue: str) -> str:
        """ZSET, every score 0: ``"<concurrency key> <held_since> <id>"`` of each task set
        aside while its key was full, so a lexical range gives one key's oldest."""
        return self._key("held", self._q(queue))

    def starts(self, queue: str) -> str:
        """ZSET: the reservation token of each start within the queue's RATE_LIMIT window ->
        its time on Redis's clock (it expires with the window)."""
        return self._key("starts", self._q(queue))

    def admission(self, queue: str) -> list[str]:
        """The keys of a queue's limits, in the order admission.lib reads them."""
        return [self.full(queue), self.slot_wake(queue), self.running_keys(queue),
                self.held(queue), self.starts(queue)]

    def waiting(self, queue: str) -> list[str]:
        """The keys where a queue's pending tasks wait, in the order the scripts take them:
        pending list, prioritized set, its sequence counter, its wake list."""
        return [self.pending(queue), self.prioritized(queue), self.priority_sequence(queue),
                self.priority_wake(queue)]

    def waiting_tasks(self, queue: str) -> str:
        """ZSET: the tasks of a queue waiting for their dependencies -> time they were
        enqueued. No blueque 1.0 worker reads it, so none takes a waiting task early."""
        return self._key("waiting_tasks", self._q(queue))

    def dependents(self, task_id: str) -> str:
        """SET: the ids of the tasks still waiting for this one to end (one member per edge;
        the script recording its end settles each). Also kept for the dependents a failure
        cancelled, so that a retry revives them."""
        return self._key("dependents", task_id)

    def settling(self, queue: str) -> str:
        """HASH index: id of an ended task whose dependents are still to be settled -> SSCAN
        cursor of its dependents set (depends.lib hands over what one script would take too
        long to do; settle.lua goes on from there)."""
        return self._shared("settling", queue)

    def workflow(self, workflow_id: str) -> str:
        """STRING: JSON of a workflow (chain, group): its tasks' ids, step by step."""
        return self._key("workflow", workflow_id)

    def dependency_templates(self) -> str:
        """The key names the dependency scripts build for a task or queue they only learn of
        as they go (depends.lib), a line each, in the order depends.lib reads them:
        ``before<TAB>after`` (the key is ``before + name + after``), or the key alone for an
        index shared by every queue (one key outside cluster mode)."""
        lines = []
        for key_of in (self.waiting_tasks, self.pending, self.prioritized,
                       self.priority_sequence, self.priority_wake, self.scheduled,
                       self.due_queues, self.failed, self.unique, self.error_types,
                       lambda queue: self.failed_of_type(queue, ""), self.dependents,
                       self.task, self.settling):
            marked = key_of("\0")
            lines.append("\t".join(self.around(key_of)) if "\0" in marked else marked)
        return "\n".join(lines)

    def listener_leases(self, queue: str) -> str:
        """ZSET: listener id -> time its heartbeat expires. Only our listeners are in it, so a
        listener of the listeners set that is absent here is a blueque 1.0 listener."""
        return self._key("listener_leases", self._q(queue))

    def listener_info(self, listener_id: str) -> str:
        """HASH describing a live listener of ours: host, pid, queues, concurrency, beat."""
        return self._key("listener", listener_id)

    def cancels(self, listener_id: str, queue: str) -> str:
        """SET of task ids whose cancellation the listener has still to carry out: one per
        listener, or in cluster mode one per listener and queue (in the queue's slot)."""
        if self.cluster:
            return self._key("cancels", self._q(queue), listener_id)
        return self._key("cancels", listener_id)

    def lease(self, task_id: str) -> str:
        """STRING holding the lease token of a running task, with an expiry its process renews."""
        return self._key("lease", task_id)

    def periodic(self, name: str) -> str:
        """STRING: the last due time a periodic task was enqueued for (exactly-once guard)."""
        return self._key("periodic", self._q(name))

    def due_queues(self, queue: str) -> str:
        """ZSET index: queue -> earliest eta of the scheduled tasks we wrote (never later than
        the true earliest), so that a scheduler pass reads only the queues that are due."""
        return self._shared("due_queues", queue)

    def lease_expiries(self, queue: str) -> str:
        """ZSET index: task id -> when its lease lapses (Redis's clock), kept by start,
        renew_lease and finish, so that a reaper pass reads only lapsed leases."""
        return self._shared("lease_expiries", queue)

    def listener_expiries(self, queue: str) -> str:
        """ZSET index: ``"<queue> <listener id>"`` -> when its heartbeat lapses, kept by
        heartbeat, reserve and release_listener (queue names hold no space)."""
        return self._shared("listener_expiries", queue)

    def expiring_queues(self, queue: str) -> str:
        """ZSET index: queue -> earliest ``expires`` of its finished tasks we know of, so that
        expiry reads only queues with something to delete."""
        return self._shared("expiring_queues", queue)

    @property
    def reaper_clock(self) -> str:
        """STRING written by every reaper pass (with a short expiry): a pass that cannot write
        it knows Redis refuses writes, so nobody can renew a lease either."""
        return self._key("reaper_clock")

    def bulk_job(self, job_id: str) -> str:
        """HASH: progress of a bulk action (retry all, delete all) run in batches. A job id is
        ``<action>_<state>_<queue>`` (see bulk_job_id)."""
        if self.cluster:
            action, state, queue = job_id.split("_", 2)
            return self._key("bulk", action, state, self._q(queue))
        return self._key("bulk", job_id)

    def bulk_running(self, queue: str) -> str:
        """SET of the ids of the running bulk jobs, so that the reaper's loop finds them
        without reading a key per queue. (A job id is never 'running': see bulk_job_id.)"""
        if self.cluster:
            return self._key("bulk", "running", self._q(queue))
        return self._key("bulk", "running")

    def throughput(self, queue: str, hour: int) -> str:
        """HASH of a queue's ends in one hour (Unix time // 3600): '<minute>:complete' and
        '<minute>:failed' -> count; one HINCRBY per end, expiring after THROUGHPUT_KEEP."""
        return self._key("throughput", self._q(queue), str(hour))

    def started_member(self, listener_id: str, pid: int | str, task_id: str) -> str:
        return " ".join((listener_id, str(pid), task_id))
