"""``@blueque_task``: one function per queue, as in Blueque's model ("a queue is a list of tasks
of one type"), and what runs it in the task's process.

Parameters travel as a JSON object of the function's arguments by name, so any program can
enqueue with one HSET/LPUSH transaction: ``{"video_id": 42}`` from redis-cli works.
"""

from __future__ import annotations

import copy
import datetime
import difflib
import inspect
import json
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, Self, TypeVar, overload

from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.db.models import Model

from . import signals
from .conf import get_client, get_settings
from .core import client as engine
from .core import current_task
from .core.admission import concurrency_fields
from .core.depends import dependency_fields
from .core.keys import valid_name
from .core.limits import cpu_seconds, memory_bytes
from .unreachable import reaching_redis
from .workflows import decode_result

if TYPE_CHECKING:
    from .workflows import Signature

logger = logging.getLogger("django_blueque.task")

P = ParamSpec("P")
R = TypeVar("R")


class AlreadyRegistered(Exception):
    pass


class NotRegistered(LookupError):
    pass


_registry: dict[str, BluequeTask[Any, Any]] = {}


def _firing_cron(name: str, cron: str) -> str:
    """``cron`` if croniter reads it and it fires: one with no next or previous occurrence
    (``0 0 31 2 *``) would make every scheduler pass raise, so it is refused at import."""
    from croniter import CroniterBadDateError, croniter

    if not croniter.is_valid(cron):
        raise ValueError(f"{name}: invalid cron expression {cron!r}")
    try:
        croniter(cron).get_next()
        croniter(cron).get_prev()
    except CroniterBadDateError:
        raise ValueError(f"{name}: cron expression {cron!r} never fires (it has no next or "
                         "previous occurrence)") from None
    return cron


def registered_tasks() -> dict[str, BluequeTask[Any, Any]]:
    """{queue name: BluequeTask} of every registered task."""
    return dict(_registry)


def task_for_queue(queue: str) -> BluequeTask[Any, Any]:
    """The BluequeTask registered for ``queue`` (NotRegistered if none is)."""
    try:
        return _registry[queue]
    except KeyError:
        raise NotRegistered(f"no @blueque_task is registered for queue {queue!r}") from None


class _Encoder(DjangoJSONEncoder):
    """Django's JSON types (a datetime travels as its ISO string, a Decimal or UUID as a
    string); a model instance is refused with the fix."""

    def default(self, o: object) -> object:
        if isinstance(o, Model):
            raise TypeError(f"it is a model instance ({type(o).__name__}): pass its pk and "
                            "fetch the row in the task (the row may change before the task runs)")
        return super().default(o)


def encode_json(value: object, what: str) -> str:
    try:
        return json.dumps(value, cls=_Encoder, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{what} cannot be encoded as JSON: {exc}") from None


@dataclass(frozen=True)
class Periodic:
    """When a periodic task is due: every ``interval`` seconds, or on a ``cron`` expression."""

    interval: float | None = None
    cron: str | None = None


class BluequeTask(Generic[P, R]):
    """A function registered as the task of one queue. Calling it runs it inline."""

    func: Callable[..., R]  # also called with the arguments decoded from JSON (run_wire)

    def __init__(self, func: Callable[P, R],
                 queue: str | None = None, raw: bool = False, retries: int | None = None,
                 backoff: float | None = None, timeout: float | None = None,
                 retention: float | None = None,
                 periodic: float | datetime.timedelta | None = None, cron: str | None = None,
                 priority: int | None = None, memory_limit: str | int | None = None,
                 cpu_limit: float | None = None) -> None:
        self.func = func
        self.name = f"{func.__module__}.{func.__qualname__}"
        self.queue = queue or self.name
        if not valid_name(self.queue):
            raise ValueError(f"invalid queue name {self.queue!r} for {self.name}: queue names "
                             "are non-empty and have no spaces")
        self.raw = raw
        self.signature = inspect.signature(func)
        if not raw:
            for param in self.signature.parameters.values():
                if param.kind in (param.POSITIONAL_ONLY, param.VAR_POSITIONAL):
                    raise TypeError(f"{self.name}: parameter {param.name!r} cannot be passed by "
                                    "name; task arguments travel as a JSON object")
        # validates the numbers now, at import time, not at the first enqueue
        self._policy = engine.policy_fields(retries, backoff, timeout, retention)
        engine.priority_field(priority)
        self.priority = priority
        try:  # the task process's own limits, over its queue's (core/limits.py)
            self.limits = {
                **({"memory_limit": memory_bytes(memory_limit)} if memory_limit else {}),
                **({"cpu_limit": cpu_seconds(cpu_limit)} if cpu_limit is not None else {})}
        except ValueError as exc:
            raise ValueError(f"{self.name}: {exc}") from None
        self._chosen: dict[str, str] = {}  # the task-hash fields using() sets
        if periodic is not None and cron is not None:
            raise ValueError(f"{self.name}: give periodic= or cron=, not both")
        self.periodic: Periodic | None = None
        if (periodic is not None or cron is not None) and not self._callable_without_arguments():
            raise TypeError(f"{self.name}: a periodic task is called with no arguments, so it "
                            "cannot be raw=True nor have parameters without defaults")
        if periodic is not None:
            seconds = (periodic.total_seconds() if isinstance(periodic, datetime.timedelta)
                       else float(periodic))
            if seconds <= 0:
                raise ValueError(f"{self.name}: periodic interval must be positive")
            self.periodic = Periodic(interval=seconds)
        elif cron is not None:
            self.periodic = Periodic(cron=_firing_cron(self.name, cron))
        self.__doc__ = func.__doc__
        self.__name__ = func.__name__
        self.__module__ = func.__module__
        self.__wrapped__ = func

    def _callable_without_arguments(self) -> bool:
        return not self.raw and all(
            param.default is not param.empty or param.kind in (param.VAR_KEYWORD,)
            for param in self.signature.parameters.values())

    def __repr__(self) -> str:
        return f"<BluequeTask {self.name} on queue {self.queue!r}>"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.func(*args, **kwargs)

    # -- producing ------------------------------------------------------------------------------

    def using(self, *, priority: int | None = None, unique_key: str | None = None,
              unique_until: str | None = None, depends_on: Sequence[str] | None = None,
              allow_failure: bool = False, concurrency_key: str | None = None) -> Self:
        """This task with other options for the calls made through it, as Django's
        ``Task.using()``: ``encode.using(priority=10).enqueue(video_id=42)``. With a
        ``unique_key``, enqueue returns the id of the task of this queue already waiting with
        that key (or running, with ``unique_until="end"``), if any, and writes nothing; a
        higher priority raises the waiting task's. With ``depends_on`` (task ids), the task
        waits until they all completed; one that fails cancels it, unless ``allow_failure``.
        Tasks of one ``concurrency_key`` run at most the queue's MAX_RUNNING_PER_KEY at once."""
        engine.priority_field(priority)
        other = copy.copy(self)
        other.priority = priority if priority is not None else self.priority
        other._chosen = {**engine.unique_fields(unique_key, unique_until),
                         **dependency_fields(depends_on, allow_failure),
                         **concurrency_fields(concurrency_key)}
        return other

    def s(self, *args: P.args, **kwargs: P.kwargs) -> Signature:
        """This task with its arguments bound (checked now), as a step of a workflow:
        ``chain(download.s(url), publish.s())`` (see workflows.py)."""
        from .workflows import Signature

        return Signature(self, args, kwargs)

    def task_fields(self) -> dict[str, float | str]:
        """The task hash's policy fields (retries, backoff, timeout and retention: its
        decorator options over the queue's and the global settings), its priority, and the
        fields using() chose (unique key, dependencies, concurrency key)."""
        merged = get_settings().policy(self.queue)
        merged.update(self._policy)
        return {**engine.policy_fields(**merged), **engine.priority_field(self.priority),
                **self._chosen}

    def encode(self, args: tuple[object, ...], kwargs: Mapping[str, object]) -> str:
        """The wire parameters for a call: checked against the signature and JSON-encoded, or
        TypeError / ValueError naming the argument (before anything is written)."""
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{self.name}: {self._unexpected(kwargs) or exc}") from None
        arguments: dict[str, object] = {}
        for name, value in bound.arguments.items():
            param = self.signature.parameters[name]
            if param.kind == param.VAR_KEYWORD:
                arguments.update(value)
            else:
                arguments[name] = value
        for name, value in arguments.items():
            encode_json(value, f"{self.name}: argument {name!r}")
        return encode_json(arguments, f"{self.name}: arguments")

    def _unexpected(self, kwargs: Mapping[str, object]) -> str | None:
        """What is wrong with keyword arguments the function does not take, or None. bind()
        reports a missing argument first, which hides the cause of a misspelt one."""
        params = self.signature.parameters
        if any(p.kind == p.VAR_KEYWORD for p in params.values()):
            return None
        named = [n for n, p in params.items() if p.kind != p.POSITIONAL_ONLY]
        for name in kwargs:
            if name not in named:
                near = difflib.get_close_matches(name, named, n=1)
                return (f"unexpected keyword argument {name!r}" +
                        (f" (did you mean {near[0]!r}?)" if near else "") +
                        f"; it takes {self.name}{self.signature}")
        return None

    @reaching_redis()
    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> str:
        """Run the task in a listener; returns its id at once."""
        parameters = self.encode(args, kwargs)
        if get_settings().eager:
            return self._run_eagerly(parameters)
        return self._write(parameters, lambda new_id: get_client().protocol.enqueue(
            self.queue, [parameters], self.task_fields(), [new_id])[0])

    @reaching_redis()
    def schedule(self, eta: float | datetime.datetime | datetime.timedelta, *args: P.args,
                 **kwargs: P.kwargs) -> str:
        """Run the task at ``eta`` (aware datetime, timedelta from now, or Unix time)."""
        when = engine.to_timestamp(eta)
        parameters = self.encode(args, kwargs)
        if get_settings().eager:
            return self._run_eagerly(parameters)
        return self._write(parameters, lambda new_id: get_client().protocol.schedule(
            self.queue, parameters, when, self.task_fields(), new_id))

    def _write(self, parameters: str, write: Callable[[str], str]) -> str:
        """``write(new id)`` the task; signal it unless a unique task of the same key was
        waiting already (its id is returned and nothing was written)."""
        new_id = get_client().keys.new_task_id(self.queue)
        task_id = write(new_id)
        if task_id == new_id:
            signals.task_enqueued.send(self, task_id=task_id, arguments=parameters)
        return task_id

    def enqueue_on_commit(self, *args: Any, using: str | None = None, **kwargs: Any) -> str:
        """Enqueue when the current transaction of database ``using`` commits (nothing on
        rollback); returns the task's id at once, so a view can link to it."""
        if "unique_key" in self._chosen:
            raise ValueError(f"{self.name}: a unique task cannot be enqueued on commit (its id "
                             "is only known once its key is checked): call enqueue() then")
        parameters = self.encode(args, kwargs)
        task_id = (str(uuid.uuid4()) if get_settings().eager
                   else get_client().keys.new_task_id(self.queue))

        @reaching_redis()
        def write() -> None:
            if get_settings().eager:
                self._run_eagerly(parameters, task_id)
                return
            get_client().protocol.enqueue(self.queue, [parameters], self.task_fields(), [task_id])
            signals.task_enqueued.send(self, task_id=task_id, arguments=parameters)

        transaction.on_commit(write, using=using)
        return task_id

    # -- running --------------------------------------------------------------------------------

    def run_wire(self, task: engine.Task) -> object:
        """Run for a task read from Redis; returns the wire result. Parameters that are not a
        JSON object of this function's arguments fail this task with a readable error."""
        if self.raw:
            return self.func(task)
        try:
            arguments = json.loads(task.parameters or "")
        except ValueError as exc:
            raise ValueError(f"parameters are not JSON ({exc}): {(task.parameters or '')[:200]!r}"
                             ) from None
        if not isinstance(arguments, dict):
            raise TypeError(f"parameters must be a JSON object of {self.name}'s arguments, "
                            f"not {type(arguments).__name__}: {(task.parameters or '')[:200]!r}")
        try:
            self.signature.bind(**arguments)
        except TypeError as exc:
            raise TypeError(f"parameters do not match {self.name}{self.signature}: {exc}"
                            ) from None
        if current_task():
            current_task().decode_result = decode_result
        return encode_json(self.func(**arguments), f"{self.name}: the result")

    def _run_eagerly(self, parameters: str, task_id: str | None = None) -> str:
        """EAGER mode: run now, in this process, through the same JSON round trip."""
        from .results import record_eager

        task_id = task_id or str(uuid.uuid4())
        task = engine.Task(task_id, {"status": "started", "queue": self.queue,
                                     "parameters": parameters, "attempts": "1"})
        signals.task_enqueued.send(self, task_id=task_id, arguments=parameters)
        signals.task_started.send(self, task_id=task_id, attempt=1)
        try:
            result = self.run_wire(task)
        except Exception as exc:
            record_eager(task, "failed", error=exc)
            signals.task_failed.send(self, task_id=task_id, error=str(exc),
                                     error_type=type(exc).__name__)
        else:
            record_eager(task, "complete", result=result)
            signals.task_succeeded.send(self, task_id=task_id, result=result)
        return task_id


@overload
def blueque_task(func: Callable[P, R], *,
                 queue: str | None = None, raw: bool = False, retries: int | None = None,
                 backoff: float | None = None, timeout: float | None = None,
                 retention: float | None = None,
                 periodic: float | datetime.timedelta | None = None, cron: str | None = None,
                 priority: int | None = None, memory_limit: str | int | None = None,
                 cpu_limit: float | None = None) -> BluequeTask[P, R]: ...
@overload
def blueque_task(func: None = None, *,
                 queue: str | None = None, raw: bool = False, retries: int | None = None,
                 backoff: float | None = None, timeout: float | None = None,
                 retention: float | None = None,
                 periodic: float | datetime.timedelta | None = None, cron: str | None = None,
                 priority: int | None = None, memory_limit: str | int | None = None,
                 cpu_limit: float | None = None
                 ) -> Callable[[Callable[P, R]], BluequeTask[P, R]]: ...
def blueque_task(func: Callable[P, R] | None = None, *,
                 queue: str | None = None, raw: bool = False, retries: int | None = None,
                 backoff: float | None = None, timeout: float | None = None,
                 retention: float | None = None,
                 periodic: float | datetime.timedelta | None = None, cron: str | None = None,
                 priority: int | None = None, memory_limit: str | int | None = None,
                 cpu_limit: float | None = None
                 ) -> BluequeTask[P, R] | Callable[[Callable[P, R]], BluequeTask[P, R]]:
    """Register a function as the task of one queue.

    ``queue`` defaults to the function's dotted path. ``raw=True`` hands the function the
    Task itself (with its opaque ``parameters`` string), for queues fed by foreign producers.
    ``retries``, ``backoff``, ``timeout`` and ``retention`` override the settings; ``periodic``
    (seconds or timedelta) or ``cron`` makes bq_schedule enqueue it on a schedule.
    ``priority`` (-100..100, higher first) is the default of ``.using(priority=...)``.
    ``memory_limit`` (bytes, or a size such as ``"2G"``) and ``cpu_limit`` (seconds) bound
    its task process, over the queue's MEMORY_LIMIT and CPU_LIMIT settings.
    """

    def register(function: Callable[P, R]) -> BluequeTask[P, R]:
        task = BluequeTask(function, queue, raw, retries, backoff, timeout, retention,
                           periodic, cron, priority, memory_limit, cpu_limit)
        existing = _registry.get(task.queue)
        if existing is not None and existing.func is not function:
            if existing.name == task.name:
                # the same module imported twice (e.g. autoreload); keep the newest
                logger.debug("re-registering %s", task.name)
            else:
                raise AlreadyRegistered(f"queue {task.queue!r} already has task {existing.name}; "
                                        f"cannot register {task.name} for it too")
        _registry[task.queue] = task
        return task

    return register(func) if func is not None else register
