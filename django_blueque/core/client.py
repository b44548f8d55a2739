"""blueque 1.0's public API (Client, Queue, Task, Listener, Processor) on the protocol module
(Task, a task hash's read-only view, is in task.py).

Code written for blueque 1.0 runs unchanged once its import names this package instead of
``blueque``.
Additions are keyword arguments and extra attributes only.
"""

from __future__ import annotations

import datetime
import logging
import os
import threading
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

import redis
from redis.cluster import RedisCluster

from . import keys as k
from .admission import concurrency_fields
from .cluster import ClusterAccess, ClusterProtocol, cluster_redis
from .connections import AcknowledgedAccess, engine_twin, url_redis
from .context import RunningTask, current_task, set_current_task
from .depends import dependency_fields
from .lease import LeaseKeeper
from .maintenance import process_running
from .orphans import dead_local_listeners
from .outages import Outage
from .protocol import Protocol, WireValue, check_wire_value, new_token
from .protocol_upkeep import checked_eta
from .redis_access import RedisAccess
from .task import Task as Task  # blueque 1.0 has it here
from .timings import DEFAULT, Timings

logger = logging.getLogger("django_blueque.engine")

POLICY_FIELDS = ("retries", "backoff", "timeout", "retention")

LISTEN_BLOCK = 5
"""Seconds one blocking peek of ``Listener.listen()`` lasts before it is renewed."""


def to_timestamp(eta: float | datetime.datetime | datetime.timedelta) -> float:
    """A Unix time from a float, an aware datetime or a timedelta from now (checked here
    too, so that eager mode refuses what a listener would)."""
    if isinstance(eta, datetime.timedelta):
        return checked_eta(time.time() + eta.total_seconds())
    if isinstance(eta, datetime.datetime):
        if eta.tzinfo is None:
            raise ValueError("eta must be an aware datetime (naive datetimes are ambiguous)")
        return checked_eta(eta.timestamp())
    if isinstance(eta, bool) or not isinstance(eta, (int, float)):
        raise TypeError(f"eta must be a Unix time, an aware datetime or a timedelta, "
                        f"not {type(eta).__name__}")
    return checked_eta(eta)


def policy_fields(retries: float | None = None, backoff: float | None = None,
                  timeout: float | None = None, retention: float | None = None
                  ) -> dict[str, float]:
    """Validated extension fields for a task's retry, timeout and retention policy."""
    fields = {}
    for name, value in (("retries", retries), ("backoff", backoff), ("timeout", timeout),
                        ("retention", retention)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"{name} must be a number >= 0, not {value!r}")
        if name == "retries" and int(value) != value:
            raise ValueError(f"retries must be a whole number, not {value!r}")
        fields[name] = int(value) if name == "retries" else value
    return fields


def priority_field(priority: int | None) -> dict[str, int]:
    """The task-hash field of a priority: none for None or 0 (blueque 1.0's order: the pending
    list, which 1.0 workers read too), else ``{'priority': n}``. Higher runs first; Django's
    Tasks framework's range, -100..100."""
    if priority is None:
        return {}
    if isinstance(priority, bool) or not isinstance(priority, int) or (
            priority not in k.PRIORITIES):
        raise ValueError(f"priority must be a whole number from -100 to 100, not {priority!r}")
    return {"priority": priority} if priority else {}


def unique_fields(unique_key: str | None = None,
                  unique_until: str | None = None) -> dict[str, str]:
    """The task-hash fields of a unique task: none without a key. While a task holding
    ``unique_key`` waits in its queue (or runs, with ``unique_until='end'``), enqueueing
    another with that key writes nothing and returns the holder's id (see enqueue.lua)."""
    if unique_key is None:
        if unique_until is not None:
            raise ValueError("unique_until needs a unique_key")
        return {}
    if not isinstance(unique_key, str) or not unique_key:
        raise ValueError(f"unique_key must be a non-empty string, not {unique_key!r}")
    if unique_until not in (None, *k.UNIQUE_UNTIL):
        raise ValueError(f"unique_until must be one of {k.UNIQUE_UNTIL}, not {unique_until!r}")
    return {"unique_key": unique_key, "unique_until": unique_until or k.UNIQUE_UNTIL[0]}


def _fields(priority: int | None, policy: Mapping[str, float | None],
            unique_key: str | None = None, unique_until: str | None = None,
            depends_on: Sequence[str] | None = None,
            allow_failure: bool = False, concurrency_key: str | None = None
            ) -> dict[str, float | str]:
    return {**policy_fields(**policy), **priority_field(priority),
            **unique_fields(unique_key, unique_until),
            **dependency_fields(depends_on, allow_failure),
            **concurrency_fields(concurrency_key)}


class Client:
    """The connection to a Blueque system; makes the other objects.

    ``Client(url)`` as in blueque 1.0, or ``Client(redis_client=an_existing_client)``, whose
    server and options are used through a pool of the engine's own (see connections.py: every
    connection follows a primary that moved). ``wait_replicas``: a task's start and end count
    once that many replicas acknowledged them (within ``wait_timeout`` seconds). ``cluster``:
    ``url`` names a node of a Redis Cluster, and keys are in cluster mode (see keys.py); a
    ``redis_client`` that is a RedisCluster implies it. ``timings``: the liveness timings
    (timings.py) of every listener, task and reaper made from this client.
    """

    def __init__(self, url: str | None = None, *,
                 redis_client: redis.Redis | RedisCluster | None = None,
                 prefix: str = k.DEFAULT_PREFIX, wait_replicas: int = 0,
                 wait_timeout: float = 1.0, cluster: bool = False,
                 timings: Timings = DEFAULT, **kwargs: Any) -> None:
        if redis_client is None:
            redis_client = (cluster_redis if cluster else url_redis)(
                url or "redis://localhost:6379/0", **kwargs)
        else:
            redis_client = engine_twin(redis_client)
        self.redis = redis_client
        if isinstance(redis_client, RedisCluster):
            if wait_replicas:
                raise ValueError("wait_replicas is not available in cluster mode")
            self.protocol: Protocol = ClusterProtocol(ClusterAccess(redis_client, prefix, timings))
        else:
            self.protocol = Protocol(
                AcknowledgedAccess(redis_client, prefix, wait_replicas, wait_timeout, timings)
                if wait_replicas else RedisAccess(redis_client, prefix, timings))
        self.timings = timings
        self.keys = self.protocol.keys

    def get_queue(self, name: str) -> Queue:
        return Queue(self, name)

    def get_task(self, task_id: str) -> Task:
        return Task(task_id, cast("dict[str, str]", self.redis.hgetall(self.keys.task(task_id))))

    def get_tasks(self, task_ids: Sequence[str]) -> list[Task]:
        """Several tasks in one round trip."""
        return self.protocol.read_tasks(task_ids)

    def get_listener(self, queue_name: str) -> Listener:
        return Listener(self, queue_name)

    def get_processor(self, task: Task) -> Processor:
        return Processor(self, task)

    def cancel(self, task_id: str) -> str | None:
        """Cancel a task from any process: 'cancelled' (it was waiting), 'requested' (it is
        running; its listener stops it within seconds), a finished status, or None."""
        return self.protocol.admin.cancel(task_id)

    def queue_names(self) -> list[str]:
        return cast("list[str]", self.redis.zrange(self.keys.queues, 0, -1))


class Queue:
    """A named queue: a list of tasks of one type."""

    def __init__(self, client: Client, name: str) -> None:
        if not k.valid_name(name):
            raise ValueError(f"invalid queue name {name!r}: it must be non-empty, without spaces")
        self._client = client
        self._protocol = client.protocol
        self.name = name

    def enqueue(self, parameters: WireValue, priority: int | None = None,
                unique_key: str | None = None, unique_until: str | None = None,
                depends_on: Sequence[str] | None = None, allow_failure: bool = False,
                concurrency_key: str | None = None, **policy: float | None) -> str:
        """Add a task; returns its id. Keyword arguments: priority (-100..100, higher first;
        see priority_field), unique_key and unique_until (see unique_fields: the id returned
        is then the waiting task's, if one holds the key), depends_on and allow_failure (see
        dependency_fields: it waits for those tasks), concurrency_key (see admission.py),
        retries, backoff, timeout, retention."""
        return self._protocol.enqueue(self.name, [parameters], _fields(
            priority, policy, unique_key, unique_until, depends_on, allow_failure,
            concurrency_key))[0]

    def enqueue_many(self, parameters_list: Iterable[WireValue], priority: int | None = None,
                     **policy: float | None) -> list[str]:
        """Add many tasks in one round trip; returns their ids in order."""
        return self._protocol.enqueue(self.name, list(parameters_list),
                                      _fields(priority, policy))

    def schedule(self, parameters: WireValue, eta: float | datetime.datetime | datetime.timedelta,
                 priority: int | None = None, unique_key: str | None = None,
                 unique_until: str | None = None, depends_on: Sequence[str] | None = None,
                 allow_failure: bool = False, concurrency_key: str | None = None,
                 **policy: float | None) -> str:
        """Add a task to run at ``eta`` (Unix time, aware datetime or timedelta), or once its
        dependencies ended if that is later; keyword arguments as enqueue's."""
        return self._protocol.schedule(self.name, parameters, to_timestamp(eta), _fields(
            priority, policy, unique_key, unique_until, depends_on, allow_failure,
            concurrency_key))

    def enqueue_due_tasks(self) -> list[str]:
        """Move this queue's due scheduled tasks to the queue; returns their ids. Due by this
        process's clock, as in blueque 1.0 (the scheduler, ``enqueue_due_tasks(client)``,
        goes by Redis's)."""
        return self._protocol.upkeep.move_due(self.name, by_caller_clock=True)

    def delete_task(self, task: Task) -> None:
        if task.queue != self.name:
            raise ValueError(f"Task {task.id} is not in queue {self.name}")
        self._protocol.admin.delete(self.name, task.id, task.status)

    def retry_task(self, task: Task) -> bool:
        """Put a failed task back in the queue; False if it was not failed (or was too deep
        in a long failed list to take out: see protocol_admin.UNLIST_WINDOW)."""
        return self._protocol.admin.retry(self.name, task.id) == 1


class Listener:
    """Takes tasks from one queue for one node (blueque 1.0's Listener; registers at creation).

    Its id is ``<host>_<pid>``, which blueque 1.0 workers parse. ``listen()`` waits with a
    blocking command instead of polling and reserves atomically. A daemon thread renews its
    heartbeat for as long as its process lives (or until ``stop()``), so a program that holds
    a listener while it runs a long task, as blueque 1.0 programs do, is never judged dead.
    """

    def __init__(self, client: Client, queue_name: str, listener_id: str | None = None,
                 info: Mapping[str, object] | None = None) -> None:
        self._client = client
        self._protocol = client.protocol
        self.queue = Queue(client, queue_name).name
        self.hostname = k.hostname()
        self.id = listener_id or f"{self.hostname}_{os.getpid()}"
        self._info = info or {"host": self.hostname, "pid": os.getpid(), "queues": self.queue}
        self._stopped = threading.Event()
        self._beating = threading.Lock()  # so that no beat re-registers it after stop()
        self.beat()
        # the thread holds the listener weakly: once nothing else does, it stops beating
        threading.Thread(target=_keep_beating, args=(weakref.ref(self), self._stopped,
                                                           self._protocol.timings.beat_every),
                         name=f"blueque-heartbeat-{self.queue}", daemon=True).start()

    def beat(self) -> None:
        """Renew the heartbeat, registering with the listener's info when needed."""
        registered = self._protocol.heartbeat(self.id, [self.queue], collect_cancels=False)[0]
        if registered:
            self._protocol.heartbeat(self.id, [self.queue], self._info, collect_cancels=False)

    def _beat_from_thread(self, outage: Outage) -> None:
        with self._beating:
            if self._stopped.is_set():
                return
            try:
                self.beat()
            except redis.RedisError as exc:
                outage.failed(exc)
            else:
                outage.recovered()

    def listen(self) -> Task:
        """Block until a task is reserved for this listener; returns it. (It waits on the
        pending list, as blueque 1.0 does: a task with a priority enqueued meanwhile is seen
        within LISTEN_BLOCK seconds; the forking runner waits on both.)"""
        pending = self._protocol.keys.pending(self.queue)
        while True:
            taken = self._protocol.reserve(self.queue, self.id, new_token())
            if taken is not None and taken[1]:
                return self._client.get_task(taken[0])
            if taken is not None:
                logger.warning("queue %s: dropped id %r: %s", self.queue, taken[0], taken[2])
                continue
            # Blocking peek: moves the tail to the tail (no change) once the list has one.
            self._client.redis.blmove(pending, pending, LISTEN_BLOCK, "RIGHT", "RIGHT")

    def claim_orphan(self) -> Task | None:
        """blueque 1.0's claim: the newest reserved or started task of a dead listener of this
        queue on this host (its pid is gone), which is unregistered; None if there is none.
        The task stays reserved or started under the dead listener's id, marked
        ``reclaimed_node``: the caller runs it (reserved) or waits for its pid (started), as
        1.0's runner does. Unlike 1.0, the dead listener's other unstarted tasks go back to
        the queue. (Dead listeners of other hosts, and of our runners, are the reaper's.)"""
        for listener_id in dead_local_listeners(self._protocol, self.queue, self.id):
            claimed = self._protocol.claim_orphan(listener_id, self.queue, self.id)
            if claimed is None:
                continue  # another listener claimed it first
            self._protocol.forget_listener(listener_id, [self.queue])
            task_id, requeued = claimed
            if requeued:
                logger.info("listener %s: requeued %d task(s) of dead listener %s", self.id,
                            len(requeued), listener_id)
            if task_id is not None:
                return self._client.get_task(task_id)
        return None

    def stop(self) -> None:
        """Unregister (blueque 1.0 never did) and requeue reserved tasks not yet started."""
        with self._beating:
            self._stopped.set()
        self._protocol.release_listener(self.id, self.queue, own=True)
        self._protocol.forget_listener(self.id, [self.queue])


def _keep_beating(listener_ref: weakref.ref[Listener], stopped: threading.Event,
                  every: float) -> None:
    """A Listener's heartbeat thread: every third of the heartbeat's length until ``stop()``,
    or until the listener is gone (garbage-collected: nobody can take tasks with it any more)."""
    outage = None
    while not stopped.wait(every):
        listener = listener_ref()
        if listener is None:
            return
        outage = outage or Outage(logger, f"listener {listener.id}: heartbeat")
        listener._beat_from_thread(outage)
        del listener


class Processor:
    """Updates a task while it is processed (blueque 1.0's Processor).

    ``start``, ``complete`` and ``fail`` are guarded by the task's reservation token, so a
    process whose task was handed to someone else cannot record anything.
    """

    _running: RunningTask | None

    def __init__(self, client: Client, task: Task) -> None:
        self._client = client
        self._protocol = client.protocol
        self._task_id = task.id
        # a reserved task's hash has both (listen() and the runners give reserved tasks)
        self._queue = cast(str, task.queue)
        self._listener_id = cast(str, task.node)
        self._pid = task.pid
        self._token = task.lease
        self._running = None

    @property
    def token(self) -> str | None:
        return self._token

    def start(self, pid: int) -> bool:
        """Mark the task started by ``pid``; returns False if it is no longer ours to run.

        The calling process keeps the task's lease alive from a daemon thread until it records
        the end (``complete`` or ``fail``), so the task is recovered if the caller dies first.
        ``pid`` may be another process (1.0's "started by the specified pid"): if it runs on
        this host, the lease is also let go once it has exited, so a task whose end nobody
        records is recovered; a pid this host cannot see is recorded but not watched."""
        self._pid = pid
        if self._token is None:
            # reserved by blueque 1.0: it has no token, so take one now.
            self._token = new_token()
            self._protocol.set_lease_token(self._task_id, self._token)
        started = self._protocol.start(self._queue, self._task_id, self._listener_id, pid,
                                       self._token)
        if not isinstance(started, dict):
            return False
        self._running = RunningTask(self._protocol, Task(self._task_id, started), self._token)
        LeaseKeeper(self._running, timings=self._protocol.timings).start()
        if pid == os.getpid():
            set_current_task(self._running)
        elif process_running(pid):
            threading.Thread(target=self._let_lease_go_after, args=(pid,),
                             name="blueque-watch-pid", daemon=True).start()
        return True

    def _let_lease_go_after(self, pid: int) -> None:
        """Stop renewing the lease once ``pid`` has exited (the end is then recorded by the
        caller at once, or never: then the reaper recovers the task when the lease lapses)."""
        running = self._running
        assert running is not None  # start() set it before starting this thread
        while not running.finished.wait(self._protocol.timings.renew_every):
            if not process_running(pid):
                running.finished.set()

    def complete(self, result: WireValue) -> str:
        return self._finish(k.COMPLETE, result)

    def fail(self, error: WireValue, error_type: str = "", traceback: str = "",
             retryable: bool = True, error_code: str = "") -> str:
        return self._finish(k.FAILED, error, error_type, traceback, retryable, error_code)

    def _finish(self, outcome: str, value: WireValue, error_type: str = "", traceback: str = "",
                retryable: bool = True, error_code: str = "") -> str:
        check_wire_value("result" if outcome == k.COMPLETE else "error", value)
        if self._running is not None:
            self._running.finished.set()
            if current_task() is self._running:
                set_current_task(None)
        return self._protocol.finish(
            self._queue, self._task_id, listener_id=self._listener_id, pid=self._pid,
            token=self._token, outcome=outcome, value=value, error_type=error_type,
            traceback=traceback, error_code=error_code, retryable=retryable)
