"""Log records that say which task they belong to, and the formats the bq_* commands write.

In a task's process, every record carries ``blueque_task_id``, ``blueque_queue`` and
``blueque_attempt`` (empty strings elsewhere), for a project's own formatters:
``"%(levelname)s %(blueque_task_id)s %(message)s"``. The listener adds them to every record
as it is made (``install_task_context``); ``TaskContextFilter`` adds them in processes that
have no listener (a web server sharing the same LOGGING), so one format works everywhere.
Prefixed names: a record's ``extra`` may not overwrite an attribute the record already has.
"""

import datetime
import json
import logging

from .core import current_task

TASK_ATTRIBUTES = ("blueque_task_id", "blueque_queue", "blueque_attempt")


def add_task_context(record: logging.LogRecord) -> None:
    """Set the task attributes of ``record`` from the task this process runs, if any."""
    running = current_task()
    record.blueque_task_id = running.id or ""
    record.blueque_queue = running.queue or ""
    record.blueque_attempt = running.attempt if running else ""


def install_task_context() -> None:
    """Make every record of this process (and of the task processes it forks) carry the
    task attributes, whichever logger or handler it goes through, error trackers' logging
    integrations included. Idempotent."""
    make_record = logging.getLogRecordFactory()
    if getattr(make_record, "adds_task_context", False):
        return

    def with_task_context(*args: object, **kwargs: object) -> logging.LogRecord:
        record = make_record(*args, **kwargs)
        add_task_context(record)
        return record

    with_task_context.adds_task_context = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(with_task_context)


def task_of(record: logging.LogRecord) -> dict[str, object] | None:
    """The task attributes of a task's record, or None."""
    task_id = getattr(record, "blueque_task_id", "")
    if not task_id:
        return None
    return {"task_id": task_id, "queue": getattr(record, "blueque_queue", ""),
            "attempt": getattr(record, "blueque_attempt", "")}


class TaskContextFilter(logging.Filter):
    """For a handler in LOGGING: gives records made outside a listener the task attributes
    (empty), so a format naming them works in every process."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "blueque_task_id"):
            add_task_context(record)
        return True


class TextFormatter(logging.Formatter):
    """The bq_* commands' lines; a task's records end with the task's id, queue and attempt."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = super().formatMessage(record)
        task = task_of(record)
        if task is None:
            return line
        return f"{line} [task {task['task_id']}, queue {task['queue']}, attempt {task['attempt']}]"


class JSONFormatter(logging.Formatter):
    """One JSON object per record, on one line: ``time`` (ISO 8601, UTC), ``level``,
    ``logger``, ``message``, ``pid``; ``task_id``, ``queue`` and ``attempt`` for a task's
    records; ``exception`` (its traceback) and ``stack`` when the record has them."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC)
            .isoformat(timespec="milliseconds"),
            "level": record.levelname, "logger": record.name, "message": record.getMessage(),
            "pid": record.process}
        entry.update(task_of(record) or {})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str)


FORMATTERS = {"text": TextFormatter, "json": JSONFormatter}
"""The --log-format choices of the bq_* commands."""
