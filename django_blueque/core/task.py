"""blueque 1.0's Task: a read-only view of a task hash, every field a property.

Kept apart from client.py (which re-exports it, as blueque 1.0 has it there) to keep modules
short; TaskFields declares the fields for the type checker, for Task and the Django app's
TaskResult alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from . import keys as k
from .values import ErrorEntry, parse_errors, parse_number


class TaskFields:
    """The task hash's fields as properties, for the type checker only: Task makes them below
    its class, TaskResult reads them through from its Task."""

    if TYPE_CHECKING:
        @property
        def status(self) -> str | None: ...
        @property
        def queue(self) -> str | None: ...
        @property
        def parameters(self) -> str | None: ...
        @property
        def created(self) -> float | None: ...
        @property
        def updated(self) -> float | None: ...
        @property
        def eta(self) -> float | None: ...
        @property
        def node(self) -> str | None: ...
        @property
        def pid(self) -> int | None: ...
        @property
        def error(self) -> str | None: ...
        @property
        def reclaimed_node(self) -> str | None: ...
        @property
        def attempts(self) -> int | None: ...
        @property
        def retries(self) -> int | None: ...
        @property
        def backoff(self) -> float | None: ...
        @property
        def timeout(self) -> float | None: ...
        @property
        def retention(self) -> float | None: ...
        @property
        def lease(self) -> str | None: ...
        @property
        def started(self) -> float | None: ...
        @property
        def finished(self) -> float | None: ...
        @property
        def expires(self) -> float | None: ...
        @property
        def progress(self) -> float | None: ...
        @property
        def progress_message(self) -> str | None: ...
        @property
        def checkpoint(self) -> str | None: ...
        @property
        def checkpoint_at(self) -> float | None: ...
        @property
        def error_type(self) -> str | None: ...
        @property
        def traceback(self) -> str | None: ...
        @property
        def last_error(self) -> str | None: ...
        @property
        def cancel_requested(self) -> float | None: ...
        @property
        def priority(self) -> str | None: ...
        @property
        def unique_key(self) -> str | None: ...
        @property
        def unique_until(self) -> str | None: ...


class Task(TaskFields):
    """A read-only view of a task hash, as blueque 1.0's: every field is a property (assigning
    one raises AttributeError), a missing field reads as None and an unknown task has status
    None. Numbers written by a foreign producer that do not parse read as None (the raw
    strings stay in ``fields``) rather than raising."""

    _INTS = ("pid", "attempts", "retries")
    _FLOATS = ("created", "updated", "eta", "started", "finished", "expires", "progress",
               "backoff", "timeout", "retention", "cancel_requested", "checkpoint_at")

    def __init__(self, task_id: str, fields: Mapping[str, str | None]) -> None:
        self._id = task_id
        self.fields = dict(fields)

    def __repr__(self) -> str:
        return f"<Task {self.id} {self.status}>"

    @property
    def id(self) -> str:
        return self._id

    def _field(self, name: str) -> str | int | float | None:
        value = self.fields.get(name)
        if value is None:
            return None
        if name in self._INTS:
            return parse_number(value, int)
        if name in self._FLOATS:
            return parse_number(value, float)
        return value

    @property
    def exists(self) -> bool:
        return bool(self.fields)

    if TYPE_CHECKING:
        @property
        def result(self) -> str | None: ...

    @property
    def errors(self) -> list[ErrorEntry]:
        """Every failed run's error, oldest first (see values.parse_errors)."""
        return parse_errors(self.fields)


for _name in k.PROTOCOL_FIELDS + k.EXTENSION_FIELDS:
    if _name == "errors":
        continue
    # a lambda's parameters cannot be annotated: the properties are declared in the class
    setattr(Task, _name, property(lambda task, name=_name: task._field(name),  # type: ignore[misc]
                                  doc=f"The task's {_name!r} field."))
del _name
