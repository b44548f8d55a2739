"""The Blueque protocol's operations: one method per row of the protocol table, plus the
extensions. Hold the protocol's reference (docs/reference/protocol.rst) beside this
module: each method sends the commands its row lists, as one transaction or one Lua script.
The run path is here; the other operations are in the parts a Protocol owns (protocol_upkeep.py,
protocol_admin.py, protocol_workflows.py, protocol_runs.py), each reaching Redis through the
protocol's one RedisAccess (redis_access.py).

Values are written as blueque 1.0 writes them: strings, ints via ``str()``, times as
``time.time()`` floats via ``repr()``.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TypeVar, cast

import redis
from redis.exceptions import NoScriptError

from . import keys as k
from .admission import Admission
from .depends import UnknownDependency, check_dependencies
from .protocol_admin import UNLIST_WINDOW, AdminOperations
from .protocol_runs import RunOperations
from .protocol_upkeep import UpkeepOperations, _optional, checked_eta, encode_time, now
from .protocol_workflows import WorkflowOperations
from .task import Task
from .tracing import traced_enqueue
from .values import Taken, taken

if TYPE_CHECKING:
    from redis.client import Pipeline

    from .redis_access import RedisAccess

WireValue = str | bytes | int | float
"""What Redis stores as a task's parameters, result or error (redis-py encodes it)."""

_W = TypeVar("_W")

ENQUEUE_BATCH = 1000
"""Most tasks one enqueue script call writes (Redis runs a script alone: keep it short)."""

UNWRITTEN_WAIT = 60.0
UNWRITTEN_PAUSE = 1.0
"""How long an id pushed before its task hash is kept waiting for it (then it fails), and the
pause between two looks (see reserve.lib's wait_for_hash)."""



def check_wire_value(name: str, value: _W) -> _W:
    """Parameters and results are strings on the wire. blueque 1.0 also let redis-py turn
    ints, floats and bytes into strings, so those are accepted too; anything else is refused
    before a byte is written."""
    if isinstance(value, bool) or not isinstance(value, (str, bytes, int, float)):
        raise TypeError(
            f"{name} must be a string (or bytes, int, float), not {type(value).__name__}")
    return value


NO_LIMITS = Admission()


def new_token() -> str:
    return uuid.uuid4().hex


class Protocol:
    """The operations, bound to one Redis client and one key prefix (``access``): the run
    path here, and its parts: the scheduler's and the reaper's (``upkeep``), the admin's
    (``admin``), the workflows' (``workflows``) and what a run writes besides its start and
    end (``runs``)."""

    def __init__(self, access: RedisAccess) -> None:
        self.access = access
        self.redis = access.redis
        self.keys = access.keys
        self.timings = access.timings
        self.workflows = WorkflowOperations(access, self.enqueue)
        self.upkeep = UpkeepOperations(access, self.enqueue, self.workflows.forget_ended)
        self.admin = AdminOperations(access, self.workflows.settle, self.workflows.forget_ended)
        self.runs = RunOperations(access)

    # -- producers -------------------------------------------------------------------------

    @traced_enqueue
    def enqueue(self, queue: str, parameters_list: Sequence[WireValue],
                extra: Mapping[str, object] | None = None,
                task_ids: Sequence[str | None] | None = None,
                pipe: Pipeline | None = None, status: str = k.PENDING) -> list[str]:
        """HSET task ...; ZINCRBY queues 0 Q; LPUSH pending id -- for each parameters string,
        atomically, in one script call per ENQUEUE_BATCH tasks (several calls go in one MULTI).
        ``task_ids`` lets a caller choose the ids (to hand one out before the task is written);
        with ``pipe`` (a transaction the caller executes) the calls join it. With a
        ``unique_key`` in ``extra`` (one task, no pipe), returns the id of the task already
        holding that key, if any, having written nothing (see enqueue.lua)."""
        for parameters in parameters_list:
            check_wire_value("parameters", parameters)
        fields = [item for name, value in (extra or {}).items() if value is not None
                  for item in (name, str(value))]
        if "unique_key" in fields[::2] and (len(parameters_list) != 1 or pipe is not None):
            raise ValueError("a unique_key names one task: enqueue it alone, not in a batch")
        chosen = task_ids or [None] * len(parameters_list)
        fresh = iter(self.keys.new_task_ids(queue, sum(not task_id for task_id in chosen)))
        ids = [task_id or next(fresh) for task_id in chosen]
        for task_id in task_ids or ():
            if task_id:
                self.keys.check_task_id(queue, task_id)
        self.register_queues([queue])
        # A task without extension fields (no priority, eta, unique key) uses two keys: the
        # others stay unsent, since every argument costs the client ~0.6 us to pack.
        keys = [self.keys.queues_in_slot(queue), self.keys.pending(queue)]
        if fields:
            keys += [*self.keys.waiting(queue)[1:], self.keys.scheduled(queue),
                     self.keys.due_queues(queue), self.keys.unique(queue)]
        templates = ""
        if "depends_on" in fields[::2]:
            check_dependencies(self.keys, queue, str((extra or {})["depends_on"]),
                               len(parameters_list))
            templates = self.access.dependency_templates
        head = [queue, self.access.task_prefix, status, encode_time(now()), UNLIST_WINDOW,
                templates, len(fields) // 2, *fields]
        tasks = [item for pair in zip(ids, parameters_list, strict=True) for item in pair]
        calls = [head + tasks[start:start + 2 * ENQUEUE_BATCH]
                 for start in range(0, len(tasks), 2 * ENQUEUE_BATCH)]
        script = self.access.script("enqueue")
        try:
            if pipe is None and len(calls) == 1:
                reply = script(keys=keys, args=calls[0])
                if reply is None:  # the task is written: the sweep will index it
                    self.access.broken_index(self.keys.due_queues(queue), mend=False)
                return [reply] if reply else ids
            own = pipe is None
            pipe = self.redis.pipeline(transaction=True) if pipe is None else pipe
            for args in calls:
                script(keys=keys, args=args, client=pipe)
            if own:
                pipe.execute()
                pipe.reset()
        except redis.ResponseError as exc:
            raise UnknownDependency.raised_by(exc) from None
        return ids

    def schedule(self, queue: str, parameters: WireValue, eta: float,
                 extra: Mapping[str, object] | None = None,
                 task_id: str | None = None) -> str:
        """MULTI; HSET task ... eta E; ZINCRBY queues 0 Q; ZADD scheduled E id; EXEC, as one
        script (enqueue.lua). An eta in the past is a plain enqueue, as in blueque 1.0."""
        eta = checked_eta(eta)
        if eta < now():
            return self.enqueue(queue, [parameters], extra, [task_id])[0]
        return self.enqueue(queue, [parameters], dict(extra or {}, eta=encode_time(eta)),
                            [task_id], status=k.SCHEDULED)[0]

    # -- listeners -------------------------------------------------------------------------

    def heartbeat(self, listener_id: str, queues: Sequence[str],
                  info: Mapping[str, object] | None = None, collect_cancels: bool = True,
                  ttl: float | None = None) -> tuple[bool, list[str], list[str]]:
        """Register or renew a listener on its queues until Redis's clock + ``ttl``, writing
        ``info`` (fields of its info hash) if given. Returns ``(registered, cancels, skipped)``:
        whether this beat (re-)registered it (its info must then be written whole), the task
        ids it must cancel, and the queues whose keys hold the wrong type."""
        fields = [item for field, value in (info or {}).items() for item in (field, str(value))]
        registered, cancels, skipped = False, [], []
        for group in self.access.slot_groups(queues):
            keys = [self.keys.queues_in_slot(group[0]), self.keys.cancels(listener_id, group[0]),
                    self.keys.listener_expiries(group[0])]
            for queue in group:
                keys += [self.keys.listeners(queue), self.keys.listener_leases(queue)]
            args = [listener_id, ttl or self.timings.heartbeat, "1" if collect_cancels else "0",
                    len(group), *group]
            if fields:
                keys.append(self.keys.listener_info(listener_id))
                args += fields
            reply = self.access.script("heartbeat")(keys=keys, args=args)
            registered = registered or bool(reply[0])
            cancels += reply[1]
            skipped += reply[2]
        return registered, cancels, skipped

    def register_queues(self, queues: Sequence[str], listened: bool = False) -> None:
        """What a queue needs before its first task is written: nothing here (the scripts
        add it to the queues set); see ClusterProtocol."""

    def release_listener(self, listener_id: str, queue: str, own: bool = False
                         ) -> tuple[list[str], list[str]] | None:
        """Unregister a listener from one queue and requeue its unstarted tasks.
        Returns ``(requeued ids, started ids)``, or None when someone else released it."""
        released = self._release_listener(listener_id, queue, own)
        if released is None:
            return None
        return released[0], released[1]

    def claim_orphan(self, listener_id: str, queue: str, claimer: str
                     ) -> tuple[str | None, list[str]] | None:
        """blueque 1.0's claim of a dead listener: release it, but leave its newest reserved or
        started task (marked ``reclaimed_node``) for ``claimer`` to run or watch. Returns
        ``(claimed id or None, requeued ids)``, or None when someone else released it."""
        released = self._release_listener(listener_id, queue, False, claimer)
        if released is None:
            return None
        return released[2], released[0]

    def _release_listener(self, listener_id, queue, own, *claimer):
        return self.access.script("release_listener")(
            keys=[self.keys.listeners(queue), self.keys.queues_in_slot(queue),
                  self.keys.listener_leases(queue), self.keys.reserved(queue, listener_id),
                  self.keys.pending(queue), self.keys.listener_expiries(queue),
                  *self.keys.waiting(queue)[1:]],
            args=[listener_id, queue, self.access.task_prefix, encode_time(now()),
                  "1" if own else "0", *claimer])

    def forget_listener(self, listener_id: str, queues: Sequence[str]) -> None:
        """Delete the extension keys of a listener that has left all its queues."""
        self.redis.delete(self.keys.listener_info(listener_id), *{
            self.keys.cancels(listener_id, queue) for queue in queues or [""]})

    def add_listener_v1(self, listener_id, queue):
        """blueque 1.0's registration: MULTI; SADD listeners L; ZINCRBY queues 1 Q; EXEC."""
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.sadd(self.keys.listeners(queue), listener_id)
            pipe.zincrby(self.keys.queues_in_slot(queue), 1, queue)
            pipe.execute()

    def reserve(self, queue: str, listener_id: str, token: str
                ) -> tuple[str, bool, str] | None:
        """Move the next pending id (the first of the highest priority, see reserve.lib) to
        the listener's reserved list and mark the task reserved, atomically. Returns None when
        the queue is empty (or its next id waits for its hash: reserve.lib), else ``(task id,
        True, timeout)`` where timeout is the task's own timeout field ('' for none), or
        ``(task id, False, why)`` for an id dropped because no pending task was behind it."""
        keys, args = self._reserve_call(queue, listener_id, token)
        found = self.access.script("reserve")(
            keys=[*keys, *self._unwritten_keys(queue), self.keys.failed(queue),
                  self.keys.error_types(queue)],
            args=[*args, self.keys.failed_of_type(queue, ""), UNWRITTEN_WAIT, UNWRITTEN_PAUSE])
        if found is None:
            return None
        return found[0], found[1] == "ok", found[2]

    def take(self, queue: str, listener_id: str, token: str, pid: int,
             admission: Admission = NO_LIMITS, lease_ttl: float | None = None) -> Taken | None:
        """reserve, then start with ``pid``, in one step (take.lua: the runner's way, its task
        process forked first), within the queue's limits (``admission``). None when the queue
        is empty (or as reserve), else ``(task id, 'ok', start's reply, more)`` (more: other
        tasks wait in the queue), ``(task id, 'skipped', why, False)`` (dropped, as reserve
        drops it), ``(task id, 'unstarted', why, False)`` (reserved, but a key of the wrong
        type refused the start: the caller puts it back), ``('', 'full', 0, False)`` and
        ``('', 'rate', seconds, False)`` when the limits refused a start, or ``('', 'held',
        0, True)`` when it set many tasks of full keys aside and started none (admission.py)."""
        return taken(self.access.script("take")(
            *self._take_call(queue, listener_id, token, pid, admission, lease_ttl)))

    def _take_call(self, queue: str, listener_id: str, token: str, pid: int,
                   admission: Admission = NO_LIMITS, lease_ttl: float | None = None
                   ) -> tuple[list[str], list[WireValue]]:
        keys, args = self._reserve_call(queue, listener_id, token)
        return ([*keys, self.keys.started(queue), self.keys.failed(queue),
                 self.keys.lease_expiries(queue), self.keys.unique(queue),
                 self.keys.error_types(queue), *self._unwritten_keys(queue),
                 *self.keys.admission(queue)],
                [*args, self.keys.lease(""), pid, int((lease_ttl or self.timings.lease) * 1000),
                 self.keys.failed_of_type(queue, ""), UNWRITTEN_WAIT, UNWRITTEN_PAUSE,
                 self.access.dependency_templates, *admission.script_args()])

    def _unwritten_keys(self, queue: str) -> list[str]:
        """Where an id waits for its hash (reserve.lib's wait_for_hash)."""
        return [self.keys.scheduled(queue), self.keys.due_queues(queue)]

    def _reserve_call(self, queue: str, listener_id: str, token: str
                      ) -> tuple[list[str], list[WireValue]]:
        """The keys and arguments of reserve_next (reserve.lib), first of take's too."""
        return ([self.keys.pending(queue), self.keys.reserved(queue, listener_id),
                 self.keys.prioritized(queue), self.keys.priority_wake(queue),
                 self.keys.listener_leases(queue), self.keys.listener_expiries(queue)],
                [self.access.task_prefix, listener_id, encode_time(now()), token, queue,
                 self.timings.heartbeat])

    def reserved_under(self, queue: str, listener_id: str, token: str) -> list[str]:
        """The ids of a listener's reserved list whose task holds ``token`` (a reservation
        whose reply was lost: see lost_takes.py)."""
        ids = cast("list[str]", self.redis.lrange(self.keys.reserved(queue, listener_id), 0, -1))
        with self.redis.pipeline(transaction=False) as pipe:
            for task_id in ids:
                pipe.hget(self.keys.task(task_id), "lease")
            leases = pipe.execute(raise_on_error=False)
        return [task_id for task_id, lease in zip(ids, leases, strict=True) if lease == token]

    def read_tasks(self, task_ids: Sequence[str]) -> list[Task]:
        """Several tasks' hashes in one round trip."""
        with self.redis.pipeline(transaction=False) as pipe:
            for task_id in task_ids:
                pipe.hgetall(self.keys.task(task_id))
            replies = pipe.execute()
        return [Task(task_id, fields) for task_id, fields in zip(task_ids, replies, strict=True)]

    # -- task processes --------------------------------------------------------------------

    def set_lease_token(self, task_id: str, token: str) -> None:
        """HSET task lease <token>: a token for a task reserved by blueque 1.0 (which writes
        none), so that its start and end are guarded like those of a task we reserved."""
        self.redis.hset(self.keys.task(task_id), "lease", token)

    def start(self, queue: str, task_id: str, listener_id: str, pid: int, token: str,
              lease_ttl: float | None = None) -> dict[str, str] | int:
        """MULTI; SADD started "L pid id"; HSET task status started pid P; EXEC, guarded by
        the reservation token and taking the task's lease (start.lib). Returns the task's
        fields (go), 0 (not ours any more) or -1 (cancelled while reserved: recorded as
        failed)."""
        started = self.access.script("start")(
            keys=[self.keys.task(task_id), self.keys.started(queue), self.keys.lease(task_id),
                  self.keys.reserved(queue, listener_id), self.keys.failed(queue),
                  self.keys.lease_expiries(queue), self.keys.unique(queue),
                  self.keys.error_types(queue)],
            args=[task_id, self.keys.started_member(listener_id, pid, task_id), pid, token,
                  encode_time(now()), int((lease_ttl or self.timings.lease) * 1000), listener_id,
                  self.keys.failed_of_type(queue, ""), self.access.dependency_templates])
        if isinstance(started, list):
            return dict(zip(started[::2], started[1::2], strict=True))
        return started

    def finish(self, queue: str, task_id: str, *, listener_id: str | None,
               pid: int | str | None, token: str | None, outcome: str, value: WireValue,
               error_type: str = "", traceback: str = "", error_code: str = "",
               retryable: bool = True, policy: Mapping[str, float | None] | None = None,
               lapsed_only: bool = False, end_id: str = "",
               usage: Mapping[str, float] | None = None) -> str:
        """blueque 1.0's complete or fail transaction (LREM reserved; SREM started; HSET task;
        LPUSH complete|failed), guarded by the token, applying the retry policy on failure.
        ``outcome``: 'complete', 'failed', or 'requeue' (the run never began: back to the
        queue, the attempt not counted). ``policy``: the queue's defaults (retries, backoff,
        retention) for the fields a task hash lacks. ``lapsed_only``: the reaper's recovery,
        refused if the task's lease is held again. A failure, retried or not, is appended to
        the task's ``errors`` (with ``error_code``: the exception's ``code``, see values.py).
        ``end_id``: the caller's id for this end, the same on each try: a try whose reply was
        lost after Redis recorded the end is answered with that end's outcome on the next.
        ``usage``: the run's ``peak_memory`` (bytes) and ``cpu`` (seconds), recorded in
        the same step if the run holds the lease. Returns 'complete', 'failed', 'retry',
        'requeued' or 'stale'."""
        check_wire_value("result" if outcome == k.COMPLETE else "error", value)
        policy = policy or {}
        stamp = now()
        hour, second = divmod(int(stamp), 3600)
        reply: str = self.access.script("finish")(
            keys=[self.keys.task(task_id), self.keys.reserved(queue, listener_id or ""),
                  self.keys.started(queue), self.keys.lease(task_id), self.keys.complete(queue),
                  self.keys.failed(queue), self.keys.scheduled(queue), self.keys.pending(queue),
                  self.keys.throughput(queue, hour), self.keys.due_queues(queue),
                  self.keys.lease_expiries(queue), self.keys.expiring_queues(queue),
                  *self.keys.waiting(queue)[1:], self.keys.unique(queue),
                  self.keys.error_types(queue), self.keys.dependents(task_id),
                  *self.keys.admission(queue)],
            args=[task_id, token or "", self.keys.started_member(listener_id or "", pid or "",
                                                                   task_id),
                  encode_time(stamp), outcome, value, error_type or "", traceback or "",
                  "1" if retryable else "0", _optional(policy.get("retention")),
                  "1" if lapsed_only else "0", _optional(policy.get("retries")),
                  _optional(policy.get("backoff")), second // 60, k.THROUGHPUT_KEEP, queue,
                  error_code or "", k.ERRORS_KEPT, self.keys.failed_of_type(queue, ""),
                  end_id, self.access.dependency_templates,
                  *((int(usage["peak_memory"]), repr(float(usage["cpu"]))) if usage
                    else ("", ""))])
        if reply.endswith(" settling"):  # more dependents than one script settles
            self.workflows.settle(queue)
            reply = reply.split()[0]
        return reply

    def renew_lease(self, task_id: str, token: str, lease_ttl: float | None = None
                    ) -> tuple[bool, bool]:
        """Extend a running task's lease. Returns ``(held, cancel requested)``."""
        reply = self.access.script("renew_lease")(*self._renew_call(task_id, token, lease_ttl))
        return bool(reply[0]), len(reply) > 1 and reply[1] is not None

    def renew_leases(self, leases: Sequence[tuple[str, str, float]]) -> list[bool]:
        """A listener's renewal of its task processes' leases, ``(task id, token, lease in
        seconds)`` each, in one round trip: whether each is still held (see lease.py)."""
        if not leases:
            return []
        renew = self.access.script("renew_lease")
        for attempt in (1, 2):
            with self.redis.pipeline(transaction=False) as pipe:
                for task_id, token, lease_ttl in leases:
                    renew(*self._renew_call(task_id, token, lease_ttl), client=pipe)
                replies = pipe.execute(raise_on_error=False)
            if attempt == 2 or not any(isinstance(r, NoScriptError) for r in replies):
                break
            self.access.forget_loaded_scripts()  # Redis restarted: load them again
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return [bool(reply[0]) for reply in replies]

    def _renew_call(self, task_id: str, token: str, lease_ttl: float | None = None
                    ) -> tuple[list[str], list[WireValue]]:
        return ([self.keys.lease(task_id), self.keys.task(task_id),
                 self.keys.lease_expiries(self.keys.queue_of(task_id))],
                [token, int((lease_ttl or self.timings.lease) * 1000), task_id])

    def report_progress(self, task_id: str, token: str, percent: float,
                        message: str = "") -> bool:
        return bool(self.access.script("progress")(
            keys=[self.keys.task(task_id)],
            args=[token, repr(float(percent)), message, encode_time(now())]))
