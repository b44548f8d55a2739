"""A backend for Django's Tasks framework: ``@task`` functions run by bq_listen.

    TASKS = {"default": {"BACKEND": "django_blueque.backends.BluequeBackend",
                         "QUEUES": ["default", "emails"],
                         "OPTIONS": {"TASK_MODULES": []}}}

Each Tasks queue ``name`` is the Blueque queue ``django.tasks.<name>``; a backend whose QUEUES
is ``[]`` (any queue) puts all its tasks on the one queue ``django.tasks.*``. A task's parameters
are the JSON object ``{"task": "<module path>", "args": [...], "kwargs": {...}, "backend":
"<alias>", "queue_name": "...", "priority": 0, "run_after": "<ISO time>" or null}``: the Task
as it was enqueued (``.using()`` included) is rebuilt from it. When the app is ready, one
raw-mode task is registered per Blueque queue of such a backend, so ``bq_listen`` runs them like
any other queue, one forked process per task, with the same retries, timeouts and retention.

Data in Redis never chooses what code runs: a task's module is imported only if it belongs to
an installed app or is listed in ``OPTIONS["TASK_MODULES"]``, the object must be a Task, and the
backend alias and queue it names must be the ones of the Blueque queue it was taken from.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import sys
from typing import Any, ParamSpec, TypeVar, cast

from django.apps import AppConfig
from django.conf import settings
from django.core.checks import Error
from django.utils import timezone
from django.utils.module_loading import import_string

from .conf import get_client, get_settings
from .core import client as engine
from .core import current_task, tracing
from .core import keys as k
from .registry import blueque_task, encode_json
from .tasks_compat import (
    BaseTaskBackend,
    InvalidTask,
    InvalidTaskBackend,
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    normalize_json,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from .unreachable import reaching_redis

QUEUE_PREFIX = "django.tasks."
ANY_QUEUE = QUEUE_PREFIX + "*"
OPTION_NAMES = ("TASK_MODULES",)

P = ParamSpec("P")
R = TypeVar("R")

STATUSES: dict[str | None, TaskResultStatus] = {
    k.SCHEDULED: TaskResultStatus.READY, k.PENDING: TaskResultStatus.READY,
    k.RESERVED: TaskResultStatus.READY, k.STARTED: TaskResultStatus.RUNNING,
    k.COMPLETE: TaskResultStatus.SUCCESSFUL, k.FAILED: TaskResultStatus.FAILED,
}


class ForbiddenTask(ValueError):
    """A task record that names code this backend may not run (or import)."""


def _time(value: float | None) -> datetime.datetime | None:
    """A Unix time as Django shows times: aware UTC with USE_TZ, else naive in TIME_ZONE."""
    if value is None:
        return None
    moment = datetime.datetime.fromtimestamp(value, tz=datetime.UTC)
    return moment if settings.USE_TZ else timezone.make_naive(moment)


class BluequeBackend(BaseTaskBackend):
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True  # higher first, then in order of arrival (reserve.lua)

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        modules = self.options.get("TASK_MODULES", ())
        # a malformed value allows nothing (the system check reports it)
        self.task_modules = tuple(name for name in modules if isinstance(name, str) and name
                                  ) if isinstance(modules, (list, tuple)) else ()

    def blueque_queue(self, queue_name: str) -> str:
        return ANY_QUEUE if not self.queues else QUEUE_PREFIX + queue_name

    def blueque_queues(self) -> list[str]:
        return sorted({self.blueque_queue(name) for name in self.queues} or {ANY_QUEUE})

    def validate_task(self, task: Task[..., Any]) -> None:
        super().validate_task(task)
        if not k.valid_name(self.blueque_queue(task.queue_name)):
            raise InvalidTask(f"Queue {task.queue_name!r} is not a valid Blueque queue name "
                              "(non-empty, no spaces).")
        module = task.module_path.rpartition(".")[0]
        if not self.may_import(module):
            # refused now, before anything is written: the worker would refuse to run it
            raise InvalidTask(f"{task.module_path}: module {module!r} is not of an installed "
                              f"app nor in TASKS[{self.alias!r}]['OPTIONS']['TASK_MODULES'], "
                              "so no worker may import it; list it there.")

    def check(self, **kwargs: Any) -> list[Any]:
        errors = []
        for queue_name in sorted(self.queues):
            if not k.valid_name(queue_name):
                errors.append(Error(
                    f"TASKS[{self.alias!r}]['QUEUES'] has an invalid queue name {queue_name!r}.",
                    hint="Blueque queue names are non-empty and have no spaces.",
                    obj=f"settings.TASKS[{self.alias!r}]", id="blueque.E020"))
        unknown = sorted(set(self.options) - set(OPTION_NAMES))
        modules = self.options.get("TASK_MODULES", [])
        if unknown or not isinstance(modules, (list, tuple)) or not all(
                isinstance(name, str) and name for name in modules):
            errors.append(Error(
                f"TASKS[{self.alias!r}]['OPTIONS'] must have only TASK_MODULES, a list of module "
                f"names, not {self.options!r}.",
                hint="Example: {'TASK_MODULES': ['myproject.jobs']}; modules of installed apps "
                     "need no listing.",
                obj=f"settings.TASKS[{self.alias!r}]", id="blueque.E021"))
        return errors

    # -- producing ------------------------------------------------------------------------------

    @reaching_redis()
    def enqueue(self, task: Task[P, R], args: list[Any], kwargs: dict[str, Any]
                ) -> TaskResult[P, R]:
        self.validate_task(task)
        run_after = task.run_after
        if run_after is not None and timezone.is_naive(run_after):
            run_after = timezone.make_aware(run_after)  # USE_TZ=False: a time in TIME_ZONE
        parameters = encode_json({
            "task": task.module_path, "args": normalize_json(list(args)),
            "kwargs": normalize_json(kwargs), "backend": self.alias,
            "queue_name": task.queue_name, "priority": task.priority,
            "run_after": task.run_after.isoformat() if task.run_after is not None else None,
        }, f"{task.name}: arguments")
        queue = self.blueque_queue(task.queue_name)
        policy = {**engine.policy_fields(**get_settings().policy(queue)),
                  **engine.priority_field(task.priority)}
        protocol = get_client().protocol
        if run_after is not None:
            task_id = protocol.schedule(queue, parameters, run_after.timestamp(), policy)
        else:
            task_id = protocol.enqueue(queue, [parameters], policy)[0]
        result = self.get_result(task_id)
        task_enqueued.send(type(self), task_result=result)
        return cast("TaskResult[P, R]", result)  # the result of this very task

    # -- reading --------------------------------------------------------------------------------

    @reaching_redis()
    def get_result(self, result_id: str) -> TaskResult[..., Any]:
        found = get_client().get_task(result_id) if k.valid_name(result_id) else None
        if found is None or not (found.queue or "").startswith(QUEUE_PREFIX):
            raise TaskResultDoesNotExist(result_id)
        try:
            return self.result_of(found, self.task_of(found))
        except ForbiddenTask as exc:
            raise TaskResultDoesNotExist(f"{result_id}: {exc}") from None

    def result_of(self, found: engine.Task, task: Task[P, R]) -> TaskResult[P, R]:
        """The TaskResult a Blueque task reads as."""
        payload = json.loads(cast(str, found.parameters))  # task_of() parsed them
        errors = [TaskError(exception_class_path=self.exception_path(error["type"]),
                            traceback=error["traceback"] or f"{error['type']}: {error['message']}")
                  for error in found.errors]  # one per failed run, oldest first
        result = TaskResult(
            task=task, id=found.id, status=STATUSES.get(found.status, TaskResultStatus.READY),
            enqueued_at=_time(found.created), started_at=_time(found.started),
            finished_at=_time(found.finished), last_attempted_at=_time(found.started),
            args=payload["args"], kwargs=payload["kwargs"], backend=self.alias, errors=errors,
            worker_ids=self.worker_ids(found))
        if found.status == k.COMPLETE:
            # a complete task has a result
            object.__setattr__(result, "_return_value", json.loads(cast(str, found.result)))
        return result

    @staticmethod
    def worker_ids(found: engine.Task) -> list[str]:
        """The listener of each run, oldest first (Django counts the attempts by them): each
        failed run's, from the error history, then the one running or that completed."""
        ran = [error["node"] for error in found.errors]
        if found.node and found.status in (k.RESERVED, k.STARTED, k.COMPLETE):
            ran.append(found.node)
        return ran

    def task_of(self, found: engine.Task) -> Task[..., Any]:
        """The Task a task record names, as it was enqueued, or ForbiddenTask: the record must
        be of this backend and of the Blueque queue it is on, and name a Task of a module this
        backend may import."""
        try:
            payload = json.loads(found.parameters or "")
            path, alias = payload["task"], payload["backend"]
            queue_name, priority = payload["queue_name"], payload["priority"]
            run_after = payload["run_after"]
            if run_after is not None:
                run_after = datetime.datetime.fromisoformat(run_after)
        except (ValueError, TypeError, KeyError) as exc:
            raise ForbiddenTask(f"not a task of Django's Tasks framework ({exc!r}): "
                                f"{(found.parameters or '')[:200]!r}") from None
        if alias != self.alias:
            raise ForbiddenTask(f"the task is of backend {alias!r}, not {self.alias!r}")
        if not isinstance(queue_name, str) or self.blueque_queue(queue_name) != found.queue:
            raise ForbiddenTask(f"queue {queue_name!r} of backend {alias!r} is not the Blueque "
                                f"queue {found.queue!r} the task is on")
        module = str(path).rpartition(".")[0]
        if not self.may_import(module):
            raise ForbiddenTask(f"{path}: module {module!r} is not of an installed app nor in "
                                f"TASKS[{alias!r}]['OPTIONS']['TASK_MODULES']")
        try:
            declared = import_string(path)
        except ImportError as exc:
            raise ForbiddenTask(f"{path} cannot be imported: {exc}") from None
        if not isinstance(declared, Task):
            raise ForbiddenTask(f"{path} is not a Task (a function decorated with @task)")
        try:
            return dataclasses.replace(declared, backend=alias, queue_name=queue_name,
                                       priority=priority, run_after=run_after)
        except (InvalidTask, InvalidTaskBackend) as exc:
            raise ForbiddenTask(f"{path}: {exc}") from None

    def exception_path(self, error_type: str | None) -> str:
        """The exception class path of a failure, as ``TaskError.exception_class`` will import
        it: only from a module already imported or one this backend may import; otherwise
        (and for the engine's "Timeout", "Killed", "Cancelled"...) ``builtins.Exception``, the
        traceback text keeping the real type."""
        module, _dot, name = (error_type or "").rpartition(".")
        if module in sys.modules:  # e.g. "django_blueque.Cancelled", a type but no class
            # (error_type is not None: its module part is not empty)
            return (cast(str, error_type) if hasattr(sys.modules[module], name)
                    else "builtins.Exception")
        if module and self.may_import(module):
            return cast(str, error_type)
        return "builtins.Exception"

    def may_import(self, module: str) -> bool:
        """Whether data in Redis may make this process import ``module``: one of an app of
        INSTALLED_APPS (as configured: a TransactionTestCase's ``available_apps`` hides apps
        from the registry, not from the workers) or of TASK_MODULES."""
        allowed = [_app_name(entry) for entry in settings.INSTALLED_APPS]
        allowed += self.task_modules
        return any(module == name or module.startswith(name + ".") for name in allowed)


def _app_name(entry: str) -> str:
    """The app an INSTALLED_APPS entry installs: the module it names, or the ``name`` of the
    AppConfig class it names (imported by Django's setup already)."""
    owner, _dot, attribute = entry.rpartition(".")
    config = getattr(sys.modules.get(owner), attribute, None)
    return config.name if isinstance(config, type) and issubclass(config, AppConfig) else entry


# -- in the listener's task process ------------------------------------------------------------

def run(found: engine.Task) -> str:
    """Run a Tasks-framework task in the listener's task process (a raw-mode Blueque task whose
    ``queue`` is the one it was taken from), sending the framework's signals."""
    try:
        # None raises TypeError, caught below as for any other malformed record
        backend = task_backends[json.loads(found.parameters)["backend"]]  # type: ignore[arg-type]
    except (ValueError, TypeError, KeyError, InvalidTaskBackend) as exc:
        raise ForbiddenTask(f"the task names no backend of TASKS ({exc!r})") from None
    if not isinstance(backend, BluequeBackend):
        raise ForbiddenTask(f"backend {backend.alias!r} is not a BluequeBackend")
    task = backend.task_of(found)
    tracing.name_run(task.module_path)
    result = backend.result_of(found, task)
    object.__setattr__(result, "status", TaskResultStatus.RUNNING)
    task_started.send(type(backend), task_result=result)
    try:
        if task.takes_context:
            value = task.call(TaskContext(task_result=result), *result.args, **result.kwargs)
        else:
            value = task.call(*result.args, **result.kwargs)
        wire = encode_json(normalize_json(value), f"{task.name}: the result")
    except BaseException as exc:
        kind = type(exc)
        result.errors.append(TaskError(exception_class_path=f"{kind.__module__}.{kind.__qualname__}",
                                       traceback=""))
        object.__setattr__(result, "status", _status_after_failure(found))
        object.__setattr__(result, "finished_at", timezone.now())
        task_finished.send(type(backend), task_result=result)
        raise
    object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
    object.__setattr__(result, "finished_at", timezone.now())
    object.__setattr__(result, "_return_value", json.loads(wire))
    task_finished.send(type(backend), task_result=result)
    return wire


def _status_after_failure(found: engine.Task) -> TaskResultStatus:
    """FAILED, or READY when the engine will retry the task (its retry rule, see finish.lua)."""
    running = current_task()
    cancelled = running is not None and running.cancel_requested.is_set()
    retries_left = (found.attempts or 1) <= (found.retries or 0)
    return TaskResultStatus.READY if retries_left and not cancelled else TaskResultStatus.FAILED


def register_queues() -> None:
    """Register the Blueque queues of every BluequeBackend in TASKS (invalid names are left to
    the system checks, which report them)."""
    for alias in getattr(settings, "TASKS", {}):
        try:
            backend = task_backends[alias]
        except InvalidTaskBackend:
            continue  # the framework's own check reports it
        if isinstance(backend, BluequeBackend):
            for queue in backend.blueque_queues():
                if k.valid_name(queue):
                    blueque_task(queue=queue, raw=True)(run)
