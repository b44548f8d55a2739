"""The Blueque protocol's operations: one method per row of the protocol table, plus the
extensions. Hold ../shared/docs/protocol.md (and the README's protocol section) beside this
module: each method sends the commands its row lists, as one transaction or one Lua script.

Values are written as blueque 1.0 writes them: strings, ints via ``str()``, times as
``time.time()`` floats via ``repr()``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any, TypeVar, cast

from . import keys as k
from .protocol_admin import AdminOperations
from .protocol_upkeep import UpkeepOperations, _optional, encode_time, now
from .script_calls import KeptConnection, ScriptCall
from .values import Taken, taken

if TYPE_CHECKING:
    import redis
    from redis.client import Pipeline
    from redis.cluster import RedisCluster

WireValue = str | bytes | int | float
"""What Redis stores as a task's parameters, result or error (redis-py encodes it)."""

_W = TypeVar("_W")

LEASE_TTL = 15.0
"""Seconds a running task's lease lasts without renewal; its process renews it every third."""

ENQUEUE_BATCH = 1000
"""Most tasks one enqueue script call writes (Redis runs a script alone: keep it short)."""

HEARTBEAT_TTL = 15.0
"""Seconds a listener counts as alive after its last heartbeat; it beats every third."""

IDLE_HEARTBEAT_TTL = 180.0
"""The same for a listener with no task (it beats every third, a command every few seconds
per hundred idle listeners): a listener that dies idle leaves nothing to recover, and the
reserve that gives it a task brings its lease back to HEARTBEAT_TTL in the same step."""

UNLIST_WINDOW = 10_000
"""How far from either end of a list an operator's retry, delete or cancel of one task looks
for its id (LPOS ... MAXLEN): a task deeper in a longer list is left alone (cancel flags it),
since LREM would scan the list whole while Redis serves nobody else."""


def check_wire_value(name: str, value: _W) -> _W:
    """Parameters and results are strings on the wire. blueque 1.0 also let redis-py turn
    ints, floats and bytes into strings, so those are accepted too; anything else is refused
    before a byte is written."""
    if isinstance(value, bool) or not isinstance(value, (str, bytes, int, float)):
        raise TypeError(
            f"{name} must be a string (or bytes, int, float), not {type(value).__name__}")
    return value


def lua_source(path):
    """A script's text, each ``--#include NAME`` line replaced by the file NAME beside it
    (Redis gives scripts no way to call one another's functions)."""
    return "\n".join(path.parent.joinpath(line.split()[1]).read_text()
                     if line.startswith("--#include ") else line
                     for line in path.read_text().splitlines())


def new_token() -> str:
    return uuid.uuid4().hex


class Protocol(UpkeepOperations, AdminOperations):
    """The operations, bound to one Redis client and one key prefix (the scheduler's and
    the reaper's in UpkeepOperations, the admin's in AdminOperations)."""

    CLUSTER = False
    """Keys in cluster mode (see keys.py)? ClusterProtocol's are."""

    TAKES_AHEAD = True
    """May a listener send its take ahead of the task (take_ahead.py)? Not in cluster mode,
    nor where each take waits for replicas."""

    def __init__(self, redis_client: redis.Redis | RedisCluster,
                 prefix: str = k.DEFAULT_PREFIX) -> None:
        self.redis = redis_client
        self.keys = k.Keys(prefix, cluster=self.CLUSTER)
        self._task_prefix = self.keys.task("")
        # all read now, so a forked task process finds them ready (it runs EVALSHA at once)
        self._scripts = {
            path.name[:-4]: self.redis.register_script(lua_source(path))
            for path in resources.files(__package__).joinpath("lua").iterdir()
            if path.name.endswith(".lua")}
        kept = KeptConnection(self.redis)  # ClusterProtocol calls its scripts its own way
        self._calls = {name: ScriptCall(script, kept) for name, script in self._scripts.items()}

    def script(self, name: str) -> Callable[..., Any]:
        """A Lua script of lua/, run by EVALSHA (and loaded by redis-py when Redis lacks it),
        on a connection kept for script calls (see script_calls.py)."""
        return self._calls[name]

    # -- producers -------------------------------------------------------------------------

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
        head = [queue, self._task_prefix, status, encode_time(now()), UNLIST_WINDOW,
                len(fields) // 2, *fields]
        tasks = [item for pair in zip(ids, parameters_list, strict=True) for item in pair]
        calls = [head + tasks[start:start + 2 * ENQUEUE_BATCH]
                 for start in range(0, len(tasks), 2 * ENQUEUE_BATCH)]
        script = self.script("enqueue")
        if pipe is None and len(calls) == 1:
            reply = script(keys=keys, args=calls[0])
            if reply is None:  # the task is written: the sweep will index it
                self.broken_index(self.keys.due_queues(queue), mend=False)
            return [reply] if reply else ids
        own = pipe is None
        pipe = self.redis.pipeline(transaction=True) if pipe is None else pipe
        for args in calls:
            script(keys=keys, args=args, client=pipe)
        if own:
            pipe.execute()
            pipe.reset()
        return ids

    def schedule(self, queue: str, parameters: WireValue, eta: float,
                 extra: Mapping[str, object] | None = None,
                 task_id: str | None = None) -> str:
        """MULTI; HSET task ... eta E; ZINCRBY queues 0 Q; ZADD scheduled E id; EXEC, as one
        script (enqueue.lua). An eta in the past is a plain enqueue, as in blueque 1.0."""
        eta = float(eta)
        if eta < now():
            return self.enqueue(queue, [parameters], extra, [task_id])[0]
        return self.enqueue(queue, [parameters], dict(extra or {}, eta=encode_time(eta)),
                            [task_id], status=k.SCHEDULED)[0]

    # -- listeners -------------------------------------------------------------------------

    def heartbeat(self, listener_id: str, queues: Sequence[str],
                  info: Mapping[str, object] | None = None, collect_cancels: bool = True,
                  ttl: float = HEARTBEAT_TTL) -> tuple[bool, list[str], list[str]]:
        """Register or renew a listener on its queues until Redis's clock + ``ttl``, writing
        ``info`` (fields of its info hash) if given. Returns ``(registered, cancels, skipped)``:
        whether this beat (re-)registered it (its info must then be written whole), the task
        ids it must cancel, and the queues whose keys hold the wrong type."""
        fields = [item for field, value in (info or {}).items() for item in (field, str(value))]
        registered, cancels, skipped = False, [], []
        for group in self.slot_groups(queues):
            keys = [self.keys.queues_in_slot(group[0]), self.keys.cancels(listener_id, group[0]),
                    self.keys.listener_expiries(group[0])]
            for queue in group:
                keys += [self.keys.listeners(queue), self.keys.listener_leases(queue)]
            args = [listener_id, ttl, "1" if collect_cancels else "0", len(group), *group]
            if fields:
                keys.append(self.keys.listener_info(listener_id))
                args += fields
            reply = self.script("heartbeat")(keys=keys, args=args)
            registered = registered or bool(reply[0])
            cancels += reply[1]
            skipped += reply[2]
        return registered, cancels, skipped

    def slot_groups(self, queues: Sequence[str]) -> list[list[str]]:
        """``queues`` in groups that one script call may cover: all together (one per queue
        in cluster mode, see ClusterProtocol)."""
        return [list(queues)] if queues else []

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
        return self.script("release_listener")(
            keys=[self.keys.listeners(queue), self.keys.queues_in_slot(queue),
                  self.keys.listener_leases(queue), self.keys.reserved(queue, listener_id),
                  self.keys.pending(queue), self.keys.listener_expiries(queue),
                  *self.keys.waiting(queue)[1:]],
            args=[listener_id, queue, self._task_prefix, encode_time(now()), "1" if own else "0",
                  *claimer])

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
        the queue is empty, else ``(task id, True, timeout)`` where timeout is the task's own
        timeout field ('' for none), or ``(task id, False, why)`` for an id dropped because no
        pending task was behind it."""
        keys, args = self._reserve_call(queue, listener_id, token)
        found = self.script("reserve")(keys=keys, args=args)
        if found is None:
            return None
        return found[0], found[1] == "ok", found[2]

    def take(self, queue: str, listener_id: str, token: str, pid: int,
             lease_ttl: float = LEASE_TTL) -> Taken | None:
        """reserve, then start with ``pid``, in one step (take.lua: the runner's way, its task
        process forked ahead). None when the queue is empty, else ``(task id, 'ok', start's
        reply, more)`` (more: other tasks wait in the queue), ``(task id, 'skipped', why,
        False)`` (dropped, as reserve drops it) or ``(task id, 'unstarted', why, False)``
        (reserved, but a key of the wrong type refused the start: the caller puts it back)."""
        return taken(self.script("take")(*self._take_call(queue, listener_id, token, pid,
                                                          lease_ttl)))

    def take_ahead(self, queue: str, listener_id: str, token: str, pid: int
                   ) -> tuple[WireValue, ...]:
        """take's command, to be sent ahead of the task behind a blocking peek (see
        take_ahead.py); it records Redis's time when it runs. Its reply goes to ``taken()``."""
        keys, args = self._take_call(queue, listener_id, token, pid, LEASE_TTL)
        args[2] = ""  # reserve_next's now
        return ("EVALSHA", self._scripts["take"].sha, len(keys), *keys, *args)

    def _take_call(self, queue: str, listener_id: str, token: str, pid: int,
                   lease_ttl: float) -> tuple[list[str], list[WireValue]]:
        keys, args = self._reserve_call(queue, listener_id, token)
        return ([*keys, self.keys.started(queue), self.keys.failed(queue),
                 self.keys.lease_expiries(queue), self.keys.unique(queue),
                 self.keys.error_types(queue)],
                [*args, self.keys.lease(""), pid, int(lease_ttl * 1000),
                 self.keys.failed_of_type(queue, "")])

    def _reserve_call(self, queue: str, listener_id: str, token: str
                      ) -> tuple[list[str], list[WireValue]]:
        """The keys and arguments of reserve_next (reserve.lib), first of take's too."""
        return ([self.keys.pending(queue), self.keys.reserved(queue, listener_id),
                 self.keys.prioritized(queue), self.keys.priority_wake(queue),
                 self.keys.listener_leases(queue), self.keys.listener_expiries(queue)],
                [self._task_prefix, listener_id, encode_time(now()), token, queue,
                 HEARTBEAT_TTL])

    def reserved_under(self, queue: str, listener_id: str, token: str) -> list[str]:
        """The ids of a listener's reserved list whose task holds ``token`` (a reservation
        whose reply was lost: see ForkingRunner._settle_unsure)."""
        ids = cast("list[str]", self.redis.lrange(self.keys.reserved(queue, listener_id), 0, -1))
        with self.redis.pipeline(transaction=False) as pipe:
            for task_id in ids:
                pipe.hget(self.keys.task(task_id), "lease")
            leases = pipe.execute(raise_on_error=False)
        return [task_id for task_id, lease in zip(ids, leases, strict=True) if lease == token]

    # -- task processes --------------------------------------------------------------------

    def set_lease_token(self, task_id: str, token: str) -> None:
        """HSET task lease <token>: a token for a task reserved by blueque 1.0 (which writes
        none), so that its start and end are guarded like those of a task we reserved."""
        self.redis.hset(self.keys.task(task_id), "lease", token)

    def start(self, queue: str, task_id: str, listener_id: str, pid: int, token: str,
              lease_ttl: float = LEASE_TTL) -> dict[str, str] | int:
        """MULTI; SADD started "L pid id"; HSET task status started pid P; EXEC, guarded by
        the reservation token and taking the task's lease (start.lib). Returns the task's
        fields (go), 0 (not ours any more) or -1 (cancelled while reserved: recorded as
        failed)."""
        started = self.script("start")(
            keys=[self.keys.task(task_id), self.keys.started(queue), self.keys.lease(task_id),
                  self.keys.reserved(queue, listener_id), self.keys.failed(queue),
                  self.keys.lease_expiries(queue), self.keys.unique(queue),
                  self.keys.error_types(queue)],
            args=[task_id, self.keys.started_member(listener_id, pid, task_id), pid, token,
                  encode_time(now()), int(lease_ttl * 1000), listener_id,
                  self.keys.failed_of_type(queue, "")])
        if isinstance(started, list):
            return dict(zip(started[::2], started[1::2], strict=True))
        return started

    def finish(self, queue: str, task_id: str, *, listener_id: str | None,
               pid: int | str | None, token: str | None, outcome: str, value: WireValue,
               error_type: str = "", traceback: str = "", error_code: str = "",
               retryable: bool = True, policy: Mapping[str, float | None] | None = None,
               lapsed_only: bool = False) -> str:
        """blueque 1.0's complete or fail transaction (LREM reserved; SREM started; HSET task;
        LPUSH complete|failed), guarded by the token, applying the retry policy on failure.
        ``outcome``: 'complete', 'failed', or 'requeue' (the run never began: back to the
        queue, the attempt not counted). ``policy``: the queue's defaults (retries, backoff,
        retention) for the fields a task hash lacks. ``lapsed_only``: the reaper's recovery,
        refused if the task's lease is held again. A failure, retried or not, is appended to
        the task's ``errors`` (with ``error_code``: the exception's ``code``, see values.py).
        Returns 'complete', 'failed', 'retry', 'requeued' or 'stale'."""
        check_wire_value("result" if outcome == k.COMPLETE else "error", value)
        policy = policy or {}
        stamp = now()
        hour, second = divmod(int(stamp), 3600)
        return self.script("finish")(
            keys=[self.keys.task(task_id), self.keys.reserved(queue, listener_id or ""),
                  self.keys.started(queue), self.keys.lease(task_id), self.keys.complete(queue),
                  self.keys.failed(queue), self.keys.scheduled(queue), self.keys.pending(queue),
                  self.keys.throughput(queue, hour), self.keys.due_queues(queue),
                  self.keys.lease_expiries(queue), self.keys.expiring_queues(queue),
                  *self.keys.waiting(queue)[1:], self.keys.unique(queue),
                  self.keys.error_types(queue)],
            args=[task_id, token or "", self.keys.started_member(listener_id or "", pid or "",
                                                                   task_id),
                  encode_time(stamp), outcome, value, error_type or "", traceback or "",
                  "1" if retryable else "0", _optional(policy.get("retention")),
                  "1" if lapsed_only else "0", _optional(policy.get("retries")),
                  _optional(policy.get("backoff")), second // 60, k.THROUGHPUT_KEEP, queue,
                  error_code or "", k.ERRORS_KEPT, self.keys.failed_of_type(queue, "")])

    def renew_lease(self, task_id: str, token: str, lease_ttl: float = LEASE_TTL
                    ) -> tuple[bool, bool]:
        """Extend a running task's lease. Returns ``(held, cancel requested)``."""
        reply = self.script("renew_lease")(
            keys=[self.keys.lease(task_id), self.keys.task(task_id),
                  self.keys.lease_expiries(self.keys.queue_of(task_id))],
            args=[token, int(lease_ttl * 1000), task_id])
        return bool(reply[0]), len(reply) > 1 and reply[1] is not None

    def report_progress(self, task_id: str, token: str, percent: float,
                        message: str = "") -> bool:
        return bool(self.script("progress")(
            keys=[self.keys.task(task_id)],
            args=[token, repr(float(percent)), message, encode_time(now())]))

    # -- anyone ----------------------------------------------------------------------------

    def cancel(self, task_id: str) -> str | None:
        """Cancel a task wherever it is; see cancel.lua."""
        queue = cast("str | None", self.redis.hget(self.keys.task(task_id), "queue"))
        if queue is None:
            return None
        return self.script("cancel")(
            keys=[self.keys.task(task_id), self.keys.pending(queue), self.keys.scheduled(queue),
                  self.keys.failed(queue), self.keys.prioritized(queue), self.keys.unique(queue),
                  self.keys.error_types(queue)],
            args=[task_id, encode_time(now()), self.keys.cancels("", queue), UNLIST_WINDOW,
                  self.keys.failed_of_type(queue, "")])

    def retry(self, queue: str, task_id: str) -> int:
        """Put a failed task back in its queue: 1, 0 (not failed) or -1 (left alone: further
        than UNLIST_WINDOW from both ends of its failed list)."""
        return self.script("retry")(
            keys=[self.keys.task(task_id), self.keys.failed(queue), *self.keys.waiting(queue),
                  self.keys.error_types(queue)],
            args=[task_id, encode_time(now()), UNLIST_WINDOW, self.keys.failed_of_type(queue, "")])

    def delete_finished(self, queue, task_id):
        """Delete a task if it is finished: 1, 0 (not finished) or -1 (left alone: further
        than UNLIST_WINDOW from both ends of its list)."""
        return self.script("delete_finished")(
            keys=[self.keys.task(task_id), self.keys.complete(queue), self.keys.failed(queue),
                  self.keys.error_types(queue)],
            args=[task_id, UNLIST_WINDOW, self.keys.failed_of_type(queue, "")])

    def delete(self, queue: str, task_id: str, status: str | None) -> None:
        """MULTI; DEL task; LREM complete|failed 1 id; EXEC (finished tasks only)."""
        if status not in k.FINISHED:
            raise ValueError(f"Cannot delete task with status {status}")
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(self.keys.task(task_id))
            pipe.lrem(self.keys.finished(queue, status), 1, task_id)
            pipe.execute()
