"""Workflows: chains and groups of tasks, built on dependencies (``.using(depends_on=...)``).

``chain(download.s(url), group(encode.s(fmt=f) for f in FORMATS), publish.s())`` is written
in one transaction: each step's tasks depend on every task the step before ended with, so
Redis starts each step when the one before completed, and a failure cancels what follows.
Nothing is passed between steps: a task reads ``current_task().dependency_results``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from . import signals
from .conf import get_client, get_settings
from .core.protocol_workflows import WorkflowTask

if TYPE_CHECKING:
    from .registry import BluequeTask

Planned = tuple["BluequeTask[Any, Any]", WorkflowTask]
"""A task of a workflow being planned, with the registered task it runs."""


class WorkflowId(str):
    """The id of an enqueued workflow (a str), with its tasks' ids: ``task_ids`` in the order
    they were written (a chain's in its order)."""

    task_ids: list[str]

    def __new__(cls, workflow_id: str, task_ids: list[str]) -> WorkflowId:
        self = super().__new__(cls, workflow_id)
        self.task_ids = task_ids
        return self


class Signature:
    """A task with its arguments bound (``task.s(...)``), enqueued later as a workflow step."""

    def __init__(self, task: BluequeTask[Any, Any], args: tuple[object, ...],
                 kwargs: Mapping[str, object]) -> None:
        self.task = task
        self.parameters = task.encode(args, kwargs)  # refused now, not when enqueued

    def __repr__(self) -> str:
        return f"{self.task.name}.s({self.parameters})"

    def _plan(self, after: list[str], tasks: list[Planned]) -> list[str]:
        task_id = get_client().keys.new_task_id(self.task.queue)
        fields: dict[str, object] = dict(self.task.task_fields())
        if fields.get("unique_key"):
            raise ValueError(f"{self.task.name}: a unique task cannot be a workflow step")
        if after:
            own = json.loads(str(fields.get("depends_on", "[]")))
            fields["depends_on"] = json.dumps(list(dict.fromkeys(own + after)))
        tasks.append((self.task, WorkflowTask(self.task.queue, self.parameters, fields, task_id)))
        return [task_id]

    def enqueue(self) -> WorkflowId:
        return _enqueue(self)


class _Steps:
    def __init__(self, steps: Iterable[Signature | _Steps]) -> None:
        self.steps = list(steps)
        for step in self.steps:
            if not isinstance(step, (Signature, _Steps)):
                raise TypeError(f"a workflow step is a task.s(...), a chain or a group, not "
                                f"{type(step).__name__}")
        if not self.steps:
            raise ValueError(f"an empty {type(self).__name__}")

    def _plan(self, after: list[str], tasks: list[Planned]) -> list[str]:
        raise NotImplementedError

    def enqueue(self) -> WorkflowId:
        """Write every task of the workflow in one round trip; returns the workflow's id."""
        return _enqueue(self)


class chain(_Steps):  # noqa: N801  (a function to its users, as Celery's)
    """Steps run one after the other: each starts once the step before it completed."""

    def __init__(self, *steps: Signature | _Steps) -> None:
        super().__init__(steps)

    def _plan(self, after: list[str], tasks: list[Planned]) -> list[str]:
        for step in self.steps:
            after = step._plan(after, tasks)
        return after


class group(_Steps):  # noqa: N801
    """Steps run side by side; what follows a group waits for all of them."""

    def __init__(self, *steps: Signature | _Steps | Iterable[Signature | _Steps]) -> None:
        if len(steps) == 1 and not isinstance(steps[0], (Signature, _Steps)):
            super().__init__(steps[0])
        else:
            super().__init__(steps)  # type: ignore[arg-type]

    def _plan(self, after: list[str], tasks: list[Planned]) -> list[str]:
        return [task_id for step in self.steps for task_id in step._plan(after, tasks)]


def _enqueue(workflow: Signature | _Steps) -> WorkflowId:
    if get_settings().eager:
        raise ValueError("workflows do not run in EAGER mode: enqueue their tasks one by one")
    planned: list[Planned] = []
    workflow._plan([], planned)
    workflow_id = str(uuid.uuid4())
    get_client().protocol.workflows.enqueue_workflow(workflow_id, [task for _, task in planned])
    for sender, task in planned:
        signals.task_enqueued.send(sender, task_id=task.id, arguments=task.parameters)
    return WorkflowId(workflow_id, [task.id for _, task in planned])


def decode_result(raw: str) -> object:
    """A stored result as a task of ours returned it (its JSON decoded), for
    ``dependency_results``; the string itself for one that is not JSON (a raw task's, or a
    foreign worker's)."""
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def workflow_task_ids(workflow_id: str) -> list[str] | None:
    """The ids of a workflow's tasks, in the order they were written (None: no such
    workflow)."""
    return get_client().protocol.workflows.workflow_task_ids(workflow_id)
