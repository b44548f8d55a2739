"""A backend for Django's Tasks framework (Django 6+): ``@task`` functions run by bq_listen.

    TASKS = {"default": {"BACKEND": "django_blueque.backends.BluequeBackend",
                         "QUEUES": ["default", "emails"]}}

Each Tasks queue ``name`` is the Blueque queue ``django.tasks.<name>``; a task's parameters are
the JSON object ``{"task": "<module path>", "args": [...], "kwargs": {...}}``. When the app is
ready, one raw-mode task is registered per queue of such a backend, so ``bq_listen`` runs them
like any other queue, one forked process per task, with the same retries, timeouts and
retention (the ``BLUEQUE`` setting's policy of the Blueque queue).
"""

import datetime
import json

from django.conf import settings
from django.tasks import TaskContext, TaskResult, TaskResultStatus
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import TaskError
from django.tasks.exceptions import TaskResultDoesNotExist
from django.utils.module_loading import import_string

from .conf import get_client, get_settings
from .core import client as engine
from .core import keys as k
from .registry import blueque_task, encode_json

QUEUE_PREFIX = "django.tasks."

STATUSES = {
    k.SCHEDULED: TaskResultStatus.READY, k.PENDING: TaskResultStatus.READY,
    k.RESERVED: TaskResultStatus.READY, k.STARTED: TaskResultStatus.RUNNING,
    k.COMPLETE: TaskResultStatus.SUCCESSFUL, k.FAILED: TaskResultStatus.FAILED,
}


def blueque_queue(queue_name):
    return QUEUE_PREFIX + queue_name


def _time(value):
    if value is None:
        return None
    moment = datetime.datetime.fromtimestamp(value, tz=datetime.UTC)
    return moment if settings.USE_TZ else moment.replace(tzinfo=None)


class BluequeBackend(BaseTaskBackend):
    supports_defer = True
    supports_get_result = True

    def enqueue(self, task, args, kwargs):
        self.validate_task(task)
        queue = blueque_queue(task.queue_name)
        parameters = encode_json({"task": task.module_path, "args": list(args),
                                  "kwargs": kwargs}, f"{task.name}: arguments")
        policy = engine.policy_fields(**get_settings().policy(queue))
        protocol = get_client().protocol
        if task.run_after is not None:
            task_id = protocol.schedule(queue, parameters, task.run_after.timestamp(), policy)
        else:
            task_id = protocol.enqueue(queue, [parameters], policy)[0]
        return self.get_result(task_id)

    def get_result(self, result_id):
        found = get_client().get_task(result_id) if k.valid_name(result_id) else None
        if found is None or not (found.queue or "").startswith(QUEUE_PREFIX):
            raise TaskResultDoesNotExist(result_id)
        return self.result_of(found)

    def result_of(self, found):
        """The TaskResult a Blueque task reads as."""
        payload = json.loads(found.parameters)
        errors = []
        if found.status == k.FAILED:
            errors.append(TaskError(exception_class_path=found.error_type or "builtins.Exception",
                                    traceback=found.traceback or found.error or ""))
        result = TaskResult(
            task=import_string(payload["task"]), id=found.id,
            status=STATUSES.get(found.status, TaskResultStatus.READY),
            enqueued_at=_time(found.created), started_at=_time(found.started),
            finished_at=_time(found.finished), last_attempted_at=_time(found.started),
            args=payload["args"], kwargs=payload["kwargs"], backend=self.alias, errors=errors,
            worker_ids=[found.node] * (found.attempts or 0) if found.node else [])
        if found.status == k.COMPLETE:
            object.__setattr__(result, "_return_value", json.loads(found.result))
        return result


def run(found):
    """Run a Tasks-framework task in the listener's task process (a raw-mode Blueque task)."""
    payload = json.loads(found.parameters)
    task = import_string(payload["task"])
    args, kwargs = payload["args"], payload["kwargs"]
    if task.takes_context:
        context = TaskContext(task_result=task.get_backend().result_of(found))
        value = task.call(context, *args, **kwargs)
    else:
        value = task.call(*args, **kwargs)
    return encode_json(value, f"{task.name}: the result")


def register_queues():
    """Register the Blueque queue of every queue of every BluequeBackend in TASKS."""
    for params in getattr(settings, "TASKS", {}).values():
        if params.get("BACKEND") == f"{__name__}.BluequeBackend":
            for queue_name in params.get("QUEUES", ["default"]):
                blueque_task(queue=blueque_queue(queue_name), raw=True)(run)
