"""Dependencies between tasks (the primitive workflows are made of): the task-hash fields of a
task that waits for others, and what a running task reads of the tasks it waited for. The
scripts that keep the edges are in lua/depends.lib."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import redis

from .keys import Keys, valid_name

if TYPE_CHECKING:
    from .task import Task


class UnknownDependency(ValueError, redis.ResponseError):
    """``depends_on`` names an id no task has (enqueue.lua refused it; nothing was written).
    A ValueError, like any bad argument; a ResponseError, as Redis's refusal it was before."""

    @classmethod
    def raised_by(cls, exc: redis.ResponseError) -> redis.ResponseError:
        """``exc`` as this class if it is enqueue.lua's refusal of an unknown id."""
        return cls(str(exc)) if "unknown dependency" in str(exc) else exc


def dependency_fields(depends_on: Sequence[str] | None = None,
                      allow_failure: bool = False) -> dict[str, str]:
    """The task-hash fields of a task that waits for ``depends_on`` (task ids of any queue;
    duplicates count once): none without any. ``allow_failure``: a dependency that fails
    counts as ended, instead of cancelling this task."""
    if isinstance(depends_on, str):
        raise TypeError("depends_on must be a list of task ids, not a string")
    ids = list(dict.fromkeys(depends_on or ()))
    for task_id in ids:
        if not valid_name(task_id, 200):
            raise ValueError(f"depends_on: {task_id!r} is not a task id")
    fields = {"depends_on": json.dumps(ids)} if ids else {}
    if allow_failure:  # also alone: a workflow step (see workflows.py) gets its depends_on later
        fields["allow_failure"] = "1"
    return fields


def check_dependencies(keys: Keys, queue: str, depends_on: str, count: int) -> None:
    """Refuse, before anything is written, what one script call cannot do: dependencies for
    a batch, or (cluster mode, where a script reaches one hash slot) of another queue."""
    if count != 1:
        raise ValueError("depends_on names one task's dependencies: enqueue it alone")
    for dependency in json.loads(depends_on):
        if keys.cluster and keys.queue_of(dependency) != queue:
            raise ValueError(f"depends_on: {dependency} is in another queue; in cluster mode a "
                             f"task can only wait for tasks of its own queue")


def dependency_ids(task: Task) -> list[str]:
    """The ids a task waited for, in the order given ([] when it has none, or garbage)."""
    try:
        ids = json.loads(task.fields.get("depends_on") or "[]")
    except ValueError:
        return []
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        return []
    return ids


def dependency_results(read_tasks: Callable[[Sequence[str]], list[Task]], task: Task
                       ) -> dict[str, str | None]:
    """``{id: result}`` of the tasks ``task`` waited for, in the order given, as stored (None
    for one that failed, or is gone), read by ``read_tasks`` (Protocol.read_tasks)."""
    ids = dependency_ids(task)
    return {found.id: found.fields.get("result") for found in read_tasks(ids)}
