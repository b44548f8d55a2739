"""Reading a task's outcome by id: status, decoded result, error, progress, attempts, times."""

import json
import time
from typing import Any, Literal, Self, overload

from .conf import get_client, get_settings
from .core import Task
from .core.keys import FINISHED
from .core.protocol import now
from .core.task import TaskFields
from .core.values import ErrorEntry, error_code, error_fields
from .unreachable import reaching_redis

_eager_tasks: dict[str, Task] = {}


class TaskTimeout(TimeoutError):
    pass


class TaskResult(TaskFields):
    """What is known of a task. ``status`` is None for an unknown (or deleted) task. Its
    fields read through from its Task (``result`` decoded: below)."""

    def __init__(self, task: Task) -> None:
        self.task = task
        self.id = task.id

    def __repr__(self) -> str:
        return f"<TaskResult {self.id} {self.status}>"

    def __getattr__(self, name: str) -> Any:
        # every field of the task (status, error, progress, attempts, created, ...) reads through
        return getattr(self.task, name)

    @property
    def done(self) -> bool:
        """True once the task is complete or failed (``finished`` is the time it ended)."""
        return self.task.status in FINISHED

    @property
    def successful(self) -> bool:
        return self.task.status == "complete"

    @property
    def result(self) -> Any:
        """The return value, decoded from JSON (the raw string if it is not JSON)."""
        raw = self.task.result
        if raw is None:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw

    @property
    def raw_result(self) -> str | None:
        return self.task.result

    def refresh(self) -> Self:
        self.task = _read(self.id)
        return self

    def wait(self, timeout: float | None = None, interval: float = 0.05) -> Self:
        """Block until the task finishes; TaskTimeout after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.refresh().done:
            if self.task.status is None:
                raise LookupError(f"task {self.id} does not exist")
            if deadline is not None and time.monotonic() >= deadline:
                raise TaskTimeout(f"task {self.id} still {self.task.status} after {timeout} s")
            time.sleep(interval)
            interval = min(interval * 1.5, 1.0)
        return self


@reaching_redis()
def _read(task_id: str) -> Task:
    if task_id in _eager_tasks:
        return _eager_tasks[task_id]
    if get_settings().eager:
        return Task(task_id, {})
    return get_client().get_task(task_id)


def get_result(task_id: str) -> TaskResult:
    """The TaskResult of a task id (status None when there is no such task)."""
    return TaskResult(_read(task_id))


@overload
def record_eager(task: Task, status: Literal["complete"], result: object) -> None: ...
@overload
def record_eager(task: Task, status: Literal["failed"], *, error: BaseException) -> None: ...
def record_eager(task: Task, status: str, result: Any = None, error: Any = None) -> None:
    """Keep an eagerly run task's outcome in this process, as Redis would have it."""
    stamp = repr(now())
    fields = dict(task.fields, status=status, updated=stamp, finished=stamp)
    if status == "complete":
        fields["result"] = result
    else:
        message, kind, trace = error_fields(error)
        fields.update(error=message, error_type=kind, traceback=trace, errors=json.dumps([
            ErrorEntry(type=kind, message=message, code=error_code(error), time=float(stamp),
                       node="", attempt=1, traceback=trace)]))
    _eager_tasks[task.id] = Task(task.id, fields)
