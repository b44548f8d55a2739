"""blueque 1.0's public API (Client, Queue, Task, Listener, Processor) on the protocol module.

Code written for blueque 1.0 runs unchanged once its import names this package instead of
``blueque``.
Additions are keyword arguments and extra attributes only.
"""

import datetime
import logging
import os
import socket
import time

import redis
import redis.sentinel

from . import keys as k
from .context import RunningTask, set_current_task
from .protocol import HEARTBEAT_TTL, Protocol, check_wire_value, new_token

logger = logging.getLogger("django_blueque.engine")

POLICY_FIELDS = ("retries", "backoff", "timeout", "retention")


def to_timestamp(eta):
    """A Unix time from a float, an aware datetime or a timedelta from now."""
    if isinstance(eta, datetime.timedelta):
        return time.time() + eta.total_seconds()
    if isinstance(eta, datetime.datetime):
        if eta.tzinfo is None:
            raise ValueError("eta must be an aware datetime (naive datetimes are ambiguous)")
        return eta.timestamp()
    if isinstance(eta, bool) or not isinstance(eta, (int, float)):
        raise TypeError(f"eta must be a Unix time, an aware datetime or a timedelta, "
                        f"not {type(eta).__name__}")
    return float(eta)


def policy_fields(retries=None, backoff=None, timeout=None, retention=None):
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


try:
    from redis.driver_info import DriverInfo
except ImportError:  # redis-py < 7 computes its driver name once, at import
    DriverInfo = None


def engine_options():
    """Connection options of every engine client: strings, not bytes, with invalid UTF-8
    from a foreign producer replaced rather than raised (it must never crash a listener or a
    page); and the driver name computed once, since redis-py 7+ otherwise looks its own
    version up for every new connection, which costs each forked task process milliseconds."""
    options = {"decode_responses": True, "encoding_errors": "replace"}
    if DriverInfo is not None:
        options["driver_info"] = _DRIVER_INFO
    return options


_DRIVER_INFO = DriverInfo() if DriverInfo is not None else None


def decoding_twin(redis_client):
    """A client on the same server and options as ``redis_client`` with the engine's options,
    and its own pool (the original's users, e.g. a cache, keep getting bytes)."""
    pool = redis_client.connection_pool
    options = dict(pool.connection_kwargs, **engine_options())
    if isinstance(pool, redis.sentinel.SentinelConnectionPool):
        options.pop("connection_pool", None)
        twin = redis.sentinel.SentinelConnectionPool(pool.service_name, pool.sentinel_manager,
                                                     **options)
    else:
        twin = type(pool)(connection_class=pool.connection_class,
                          max_connections=pool.max_connections, **options)
    return redis.Redis(connection_pool=twin)


class Client:
    """The connection to a Blueque system; makes the other objects.

    ``Client(url)`` as in blueque 1.0, or ``Client(redis_client=an_existing_client)``, whose
    server and options are used through a pool of the engine's own (see engine_options).
    """

    def __init__(self, url=None, *, redis_client=None, prefix=k.DEFAULT_PREFIX, **kwargs):
        if redis_client is None:
            redis_client = redis.Redis.from_url(url or "redis://localhost:6379/0",
                                                **{**engine_options(), **kwargs})
        else:
            redis_client = decoding_twin(redis_client)
        self.redis = redis_client
        self.protocol = Protocol(redis_client, prefix)
        self.keys = self.protocol.keys

    def get_queue(self, name):
        return Queue(self, name)

    def get_task(self, task_id):
        return Task(task_id, self.redis.hgetall(self.keys.task(task_id)))

    def get_tasks(self, task_ids):
        """Several tasks in one round trip."""
        with self.redis.pipeline(transaction=False) as pipe:
            for task_id in task_ids:
                pipe.hgetall(self.keys.task(task_id))
            replies = pipe.execute()
        return [Task(task_id, fields) for task_id, fields in zip(task_ids, replies, strict=True)]

    def get_listener(self, queue_name):
        return Listener(self, queue_name)

    def get_processor(self, task):
        return Processor(self, task)

    def cancel(self, task_id):
        """Cancel a task from any process: 'cancelled' (it was waiting), 'requested' (it is
        running; its listener stops it within seconds), a finished status, or None."""
        return self.protocol.cancel(task_id)

    def queue_names(self):
        return self.protocol.queue_names()


class Queue:
    """A named queue: a list of tasks of one type."""

    def __init__(self, client, name):
        if not k.valid_name(name):
            raise ValueError(f"invalid queue name {name!r}: it must be non-empty, without spaces")
        self._client = client
        self._protocol = client.protocol
        self.name = name

    def enqueue(self, parameters, **policy):
        """Add a task; returns its id. Keyword arguments: retries, backoff, timeout, retention."""
        return self._protocol.enqueue(self.name, [parameters], policy_fields(**policy))[0]

    def enqueue_many(self, parameters_list, **policy):
        """Add many tasks in one round trip; returns their ids in order."""
        return self._protocol.enqueue(self.name, list(parameters_list), policy_fields(**policy))

    def schedule(self, parameters, eta, **policy):
        """Add a task to run at ``eta`` (Unix time, aware datetime or timedelta)."""
        return self._protocol.schedule(self.name, parameters, to_timestamp(eta),
                                       policy_fields(**policy))

    def enqueue_due_tasks(self):
        """Move this queue's due scheduled tasks to the queue; returns their ids."""
        return self._protocol.move_due(self.name)

    def delete_task(self, task):
        if task.queue != self.name:
            raise ValueError(f"Task {task.id} is not in queue {self.name}")
        self._protocol.delete(self.name, task.id, task.status)

    def retry_task(self, task):
        """Put a failed task back in the queue; False if it was not failed."""
        return self._protocol.retry(self.name, task.id)


def _number(kind, value):
    try:
        return kind(value)
    except (TypeError, ValueError):
        return None


class Task:
    """A read-only view of a task hash. A missing field reads as None; an unknown task has
    status None. Numbers written by a foreign producer that do not parse read as None (the raw
    strings stay in ``fields``) rather than raising."""

    _INTS = ("pid", "attempts", "retries")
    _FLOATS = ("created", "updated", "eta", "started", "finished", "expires", "progress",
               "backoff", "timeout", "retention", "cancel_requested")

    def __init__(self, task_id, fields):
        self.id = task_id
        self.fields = dict(fields)

    def __repr__(self):
        return f"<Task {self.id} {self.status}>"

    def __getattr__(self, name):
        if name in k.PROTOCOL_FIELDS or name in k.EXTENSION_FIELDS:
            value = self.fields.get(name)
            if value is None:
                return None
            if name in self._INTS:
                return _number(int, value)
            if name in self._FLOATS:
                return _number(float, value)
            return value
        raise AttributeError(name)

    @property
    def exists(self):
        return bool(self.fields)


class Listener:
    """Takes tasks from one queue for one node (blueque 1.0's Listener; registers at creation).

    Its id is ``<host>_<pid>``, which blueque 1.0 workers parse. ``listen()`` waits with a
    blocking command instead of polling and reserves atomically.
    """

    def __init__(self, client, queue_name, listener_id=None, info=None):
        self._client = client
        self._protocol = client.protocol
        self.queue = Queue(client, queue_name).name
        self.hostname = socket.getfqdn()
        self.id = listener_id or f"{self.hostname}_{os.getpid()}"
        self._info = info or {"host": self.hostname, "pid": os.getpid(), "queues": self.queue}
        self._next_beat = 0.0
        self.beat()

    def beat(self):
        """Renew the heartbeat, registering with the listener's info when needed."""
        registered, _ = self._protocol.heartbeat(self.id, [self.queue], collect_cancels=False)
        if registered:
            self._protocol.heartbeat(self.id, [self.queue], self._info, collect_cancels=False)
        self._next_beat = time.monotonic() + HEARTBEAT_TTL / 3

    def listen(self):
        """Block until a task is reserved for this listener; returns it."""
        pending = self._protocol.keys.pending(self.queue)
        while True:
            taken = self._protocol.reserve(self.queue, self.id, new_token())
            if taken is not None and taken[1] is not None:
                return self._client.get_task(taken[0])
            if taken is not None:
                logger.warning("queue %s: skipped id %s with no pending task", self.queue, taken[0])
                continue
            wait = max(0.01, self._next_beat - time.monotonic())
            # Blocking peek: moves the tail to the tail (no change) once the list has one.
            self._client.redis.blmove(pending, pending, wait, "RIGHT", "RIGHT")
            if time.monotonic() >= self._next_beat:
                self.beat()

    def claim_orphan(self):
        """Recover the tasks of dead listeners of this queue (all of them, any host for our
        listeners, this host for blueque 1.0's). Recovered tasks go back to the queue, so
        this returns None: ``listen()`` picks them up."""
        from .maintenance import reap_listeners

        reap_listeners(self._client, [self.queue])
        return None

    def stop(self):
        """Unregister (blueque 1.0 never did) and requeue reserved tasks not yet started."""
        self._protocol.release_listener(self.id, self.queue, own=True)
        self._protocol.forget_listener(self.id)


class Processor:
    """Updates a task while it is processed (blueque 1.0's Processor).

    ``start``, ``complete`` and ``fail`` are guarded by the task's reservation token, so a
    process whose task was handed to someone else cannot record anything.
    """

    def __init__(self, client, task):
        self._client = client
        self._protocol = client.protocol
        self._task_id = task.id
        self._queue = task.queue
        self._listener_id = task.node
        self._pid = task.pid
        self._token = task.lease
        self._running = None

    @property
    def token(self):
        return self._token

    def start(self, pid):
        """Mark the task started by ``pid``; returns False if it is no longer ours to run."""
        self._pid = pid
        if self._token is None:
            # reserved by blueque 1.0: it has no token, so take one now.
            self._token = new_token()
            self._protocol.redis.hset(self._protocol.keys.task(self._task_id),
                                      "lease", self._token)
        started = self._protocol.start(self._queue, self._task_id, self._listener_id, pid,
                                       self._token)
        if not isinstance(started, dict):
            return False
        if pid == os.getpid():
            # the running process keeps the lease alive, as the forking runner's children do
            self._running = RunningTask(self._protocol, Task(self._task_id, started), self._token)
            set_current_task(self._running)
            self._running.keep_lease(os.getppid(), own_process=False)
        return True

    def complete(self, result):
        return self._finish(k.COMPLETE, result)

    def fail(self, error, error_type="", traceback="", retryable=True):
        return self._finish(k.FAILED, error, error_type, traceback, retryable)

    def _finish(self, outcome, value, error_type="", traceback="", retryable=True):
        check_wire_value("result" if outcome == k.COMPLETE else "error", value)
        if self._running is not None:
            self._running.finished.set()
            set_current_task(None)
        return self._protocol.finish(self._queue, self._task_id, self._listener_id, self._pid,
                                     self._token, outcome, value, error_type, traceback,
                                     retryable)
