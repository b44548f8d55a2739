"""Readers of the dependencies of a task and of a workflow (issue 40): what a task waits for,
what waits for it, and a workflow's tasks with its progress. Bounded like every page's reads."""

import json

from ..core import keys as k
from .base import ReaderBase

MAX_EDGES = 200
"""Most dependencies and dependents a task page lists (SRANDMEMBER: a sample of more)."""
MAX_WORKFLOW = 1000
"""Most tasks of a workflow a page or the API reads."""
EDGE_FIELDS = ("status", "queue", "error")


def task_ids_of(text, most):
    """The task ids of a depends_on field or workflow record ([] for garbage)."""
    try:
        ids = json.loads(text or "[]")
    except ValueError:
        return []
    if isinstance(ids, dict):
        ids = ids.get("tasks")
    if not isinstance(ids, list):
        return []
    return [task_id for task_id in ids if isinstance(task_id, str)][:most]


class WorkflowReaders(ReaderBase):
    """The dependencies section of a task's page and the workflow API."""

    def dependencies(self, task):
        """``{"waits_for": [...], "waited_by": [...], "workflow": {...} or None}`` of a task
        (a Task of its page): each a list of Task rows (status, queue), in the order given
        for what it waits for. Two round trips at most, plus the workflow's."""
        listed = task.fields.get("depends_on")
        if "depends_on" in getattr(task, "cut", ()):  # cut for the page: read it whole
            listed, = self.read([("hget", self.keys.task(task.id), "depends_on")])
        waits_for = task_ids_of(listed, MAX_EDGES)
        waited_by, = self.read([("srandmember", self.keys.dependents(task.id), MAX_EDGES)])
        workflow = self.workflow(task.fields.get("workflow")) \
            if k.valid_name(task.fields.get("workflow")) else None
        if workflow:  # those of its workflow that waited for it, done waiting or not
            waited_by = list(dict.fromkeys(list(waited_by) + [
                row.id for row in workflow["tasks"]
                if task.id in task_ids_of(row.fields.get("depends_on"), MAX_EDGES)]))
        ids = list(dict.fromkeys(waits_for + sorted(waited_by)[:MAX_EDGES]))
        rows = {row.id: row for row in self._window(None, "ids", 0, 0, EDGE_FIELDS, ids)} \
            if ids else {}
        return {"waits_for": [rows[i] for i in waits_for],
                "waited_by": [rows[i] for i in sorted(waited_by)[:MAX_EDGES]],
                "workflow": workflow}

    def workflow(self, workflow_id):
        """A workflow's tasks (Task rows, in the order written; at most MAX_WORKFLOW) and its
        progress: ``{"id", "tasks", "total", "progress": {status: count}}``; None if there is
        no such workflow. A record that is not one is noted in unreadable (and reads empty)."""
        key = self.keys.workflow(workflow_id)
        text, = self.read([("get", key)])
        if text is None:
            return None
        ids = task_ids_of(text, MAX_WORKFLOW)
        if not ids:
            self.unreadable.setdefault(key, "not a workflow record")
        tasks = self._window(None, "ids", 0, 0, EDGE_FIELDS, ids) if ids else []
        # whole, not the window's preview: a step after a group lists every task of the group
        for row, listed in zip(tasks, self.read([("hget", self.keys.task(row.id), "depends_on")
                                                 for row in tasks]), strict=True):
            if listed is not None:
                row.fields["depends_on"] = listed
        progress = {}
        for row in tasks:
            progress[row.status or "gone"] = progress.get(row.status or "gone", 0) + 1
        return {"id": workflow_id, "tasks": tasks, "total": len(tasks), "progress": progress}
