"""The workflow operations of the protocol (Protocol.workflows): a workflow's tasks written in
one transaction, and its record read back. The edges between its tasks are the dependencies
of depends.lib; the record only names its tasks. The settling of a task's dependents (which
an end leaves to do when they are too many for one script) is here too."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from redis.exceptions import ResponseError

from .protocol_upkeep import now

if TYPE_CHECKING:
    from .redis_access import RedisAccess


class WorkflowTask:
    """One task of a workflow to write: its queue, wire parameters, task-hash fields (its
    ``depends_on`` among them) and the id chosen for it."""

    def __init__(self, queue: str, parameters: str, fields: Mapping[str, object],
                 task_id: str) -> None:
        self.queue = queue
        self.parameters = parameters
        self.fields = fields
        self.id = task_id


class WorkflowOperations:
    """A workflow's writes and reads, and the settling of dependents, through ``access``;
    ``enqueue`` is the protocol's (Protocol.enqueue), which a workflow's tasks go through."""

    def __init__(self, access: RedisAccess, enqueue: Callable[..., list[str]]) -> None:
        self.access = access
        self.keys = access.keys
        self.enqueue = enqueue

    def enqueue_workflow(self, workflow_id: str, tasks: Sequence[WorkflowTask]) -> None:
        """Write a workflow's record and its tasks (each after those it depends on) in one
        transaction: one round trip, whatever its size. Its tasks carry its id (``workflow``)."""
        record = json.dumps({"tasks": [task.id for task in tasks], "created": now()})
        with self.access.redis.pipeline(transaction=True) as pipe:
            pipe.set(self.keys.workflow(workflow_id), record)
            for task in tasks:
                self.enqueue(task.queue, [task.parameters],
                             {**task.fields, "workflow": workflow_id}, [task.id], pipe=pipe)
            pipe.execute()

    def settle(self, queue: str = "") -> int:
        """Settle the dependents that ends left to do (more than one script's batch, see
        depends.lib), in the settling index ``queue``'s tasks use, a batch per script call,
        until none is left. Returns how many ends it took up."""
        index, done = self.keys.settling(queue), 0
        while ids := self.access.redis.hkeys(index):
            for task_id in ids:
                while self.access.script("settle")(keys=[index], args=[
                        self.access.dependency_templates, now(), task_id]):
                    pass
                done += 1
        return done

    def name_stranded(self, queue: str, cursor: int, count: int, dry_run: bool = False
                      ) -> tuple[int, list[str]]:
        """Name for settle() the ends blueque 1.0 recorded of tasks that ``count`` of the
        queue's waiting tasks, read from ``cursor``, wait for (stranded.lua; ``dry_run``:
        only say which). Returns the next cursor (0: the whole index was read) and the ids of
        the ends named."""
        next_cursor, named = self.access.script("stranded")(
            keys=[self.keys.waiting_tasks(queue)],
            args=[self.access.dependency_templates, cursor, count, int(dry_run)])
        return int(next_cursor), list(dict.fromkeys(named))  # a dry run names one per edge

    def forget_ended(self, workflow_ids: Iterable[str]) -> int:
        """Delete the records of these workflows whose tasks are all gone (deleted past their
        retention, or by an operator): a record lives as long as any of its tasks. A record
        that is not one is left for an operator to see. Returns how many went."""
        forgotten = 0
        for workflow_id in set(workflow_ids):
            try:
                ids = self.workflow_task_ids(workflow_id)
            except ValueError:
                continue
            if ids is not None and not (ids and self.access.redis.exists(
                    *[self.keys.task(task_id) for task_id in ids])):
                forgotten += self.access.redis.delete(self.keys.workflow(workflow_id))
        return forgotten

    def workflow_task_ids(self, workflow_id: str) -> list[str] | None:
        """The ids of a workflow's tasks, in the order they were written; None for no such
        workflow, ValueError naming the key for a record that is not one."""
        key = self.keys.workflow(workflow_id)
        try:
            text = self.access.redis.get(key)
        except ResponseError as exc:  # WRONGTYPE: someone wrote another kind of value there
            raise ValueError(f"{key} is not a workflow record: {exc}") from None
        if text is None:
            return None
        try:
            ids = json.loads(text)["tasks"]
        except (ValueError, TypeError, KeyError):
            ids = None
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise ValueError(f"{key} is not a workflow record (JSON with a list of task ids)")
        return ids
