"""Django's Tasks framework: ``django.tasks`` where it exists (Django 6+), else the
``django-tasks`` backport (Django 5.2: ``pip install django-blueque[tasks]``). The rest of the
package imports the framework from here only, under Django 6's names.

The type checker reads the first branch only (django-stubs has Django 6's ``django.tasks``,
which the backport mirrors)."""

from typing import TYPE_CHECKING

try:
    from django.tasks import (
        DEFAULT_TASK_QUEUE_NAME,
        Task,
        TaskContext,
        TaskResult,
        TaskResultStatus,
        task,
        task_backends,
    )
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.backends.dummy import DummyBackend
    from django.tasks.base import TaskError
    from django.tasks.exceptions import InvalidTask, InvalidTaskBackend, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json
except ImportError:
    if not TYPE_CHECKING:  # the backport, under the same names
        from django_tasks import (
            DEFAULT_TASK_QUEUE_NAME,
            TaskContext,
            TaskResult,
            TaskResultStatus,
            task,
            task_backends,
        )
        from django_tasks import checks as _checks  # noqa: F401  (the backport's app imports it)
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.backends.dummy import DummyBackend
        from django_tasks.base import Task, TaskError
        from django_tasks.exceptions import InvalidTaskBackendError as InvalidTaskBackend
        from django_tasks.exceptions import InvalidTaskError as InvalidTask
        from django_tasks.exceptions import TaskResultDoesNotExist
        from django_tasks.signals import task_enqueued, task_finished, task_started
        from django_tasks.utils import normalize_json

__all__ = ["DEFAULT_TASK_QUEUE_NAME", "BaseTaskBackend", "DummyBackend", "InvalidTask",
           "InvalidTaskBackend", "Task", "TaskContext", "TaskError", "TaskResult",
           "TaskResultDoesNotExist", "TaskResultStatus", "normalize_json", "task",
           "task_backends", "task_enqueued", "task_finished", "task_started"]
