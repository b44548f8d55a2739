"""What a task's process tells the tools a team already runs, around each run (the listener's
``around_task``): a span in the enqueuing request's trace (core/tracing.py, with
opentelemetry-api installed) and the task's id, queue and attempt on the error tracker's scope
(Sentry's, when the project initialized sentry_sdk). What either buffered is sent before the
process exits, which it does with ``os._exit`` (no atexit hook runs)."""

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from .core import tracing
from .core.task import Task
from .registry import registered_tasks

FLUSH_SECONDS = 5.0
"""How long a task's process waits for its error tracker's events to be sent."""


@contextmanager
def observed_run(queue: str, task: Task, node: str) -> Iterator[None]:
    registered = registered_tasks().get(queue)
    sentry = sys.modules.get("sentry_sdk")  # imported by the project's settings, never here
    if sentry is not None and not sentry.is_initialized():
        sentry = None
    if sentry is not None:
        attempt = task.attempts or 1
        sentry.set_tags({"blueque.task_id": task.id, "blueque.queue": queue,
                         "blueque.attempt": str(attempt)})  # tags are strings
        sentry.set_context("blueque task", {"id": task.id, "queue": queue, "attempt": attempt,
                                            "node": node})
    try:
        with tracing.task_span(registered.name if registered else queue, queue, task, node):
            yield
    finally:
        if sentry is not None:
            sentry.flush(timeout=FLUSH_SECONDS)
