"""What the listener (``bq_listen``) calls around the registered tasks: the callback that runs
one in its task's process, the signals sent once its end is recorded, and the database
connections closed before each fork."""

from __future__ import annotations

import logging

from django.db import close_old_connections, connections

from . import signals
from .core import client as engine
from .core import current_task, tracing
from .registry import _registry, task_for_queue

logger = logging.getLogger("django_blueque.task")


def run_task(task: engine.Task) -> object:
    """The ForkingRunner callback: run a task with the function of the queue it was taken from,
    with fresh database connections (never one inherited across fork)."""
    running = current_task()
    queue = running.queue if running else task.queue  # the engine's: where it was taken from
    # None only for a hash without a queue outside a runner: NotRegistered, as for any other
    registered = task_for_queue(queue)  # type: ignore[arg-type]
    if queue != task.queue:
        logger.warning("task %s: its hash names queue %r but it was taken from %r; running "
                       "%s", task.id, task.queue, queue, registered.name)
        task = engine.Task(task.id, dict(task.fields, queue=queue))
    close_old_connections()
    signals.task_started.send(registered, task_id=task.id,
                              attempt=running.attempt if running else 1)
    try:
        return registered.run_wire(task)
    except BaseException as exc:
        tracing.record_failure(exc)
        raise
    finally:
        connections.close_all()


def task_ended(task: engine.Task, outcome: str, value: object, error_type: str | None
               ) -> None:
    """After the engine recorded a task's end: send the matching signal."""
    registered = _registry.get(task.queue or "")  # a hash without a queue: None
    tracing.record_outcome(outcome, value)
    if outcome == "complete":
        signals.task_succeeded.send(registered, task_id=task.id, result=value)
    elif outcome == "retry":
        running = current_task()
        signals.task_retried.send(registered, task_id=task.id, error=value,
                                  attempt=running.attempt if running else None)
    elif outcome == "failed":
        signals.task_failed.send(registered, task_id=task.id, error=value, error_type=error_type)


def close_connections_before_fork() -> None:
    """In the listener: a forked child must not share the parent's database sockets."""
    connections.close_all()
