"""The operators' operations on the protocol (Protocol.admin): the admin's bounded reads of
list pages and task hashes, its writes that act on one task (cancel, retry, delete) or, in
batches, on a whole list (bulk jobs, see bulk.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, cast

from redis.exceptions import ResponseError

from . import keys as k
from .bulk import BULK_ACTIONS
from .protocol_upkeep import encode_time, now

if TYPE_CHECKING:
    from .redis_access import RedisAccess


UNLIST_WINDOW = 10_000
"""How far from either end of a list an operator's retry, delete or cancel of one task looks
for its id (LPOS ... MAXLEN): a task deeper in a longer list is left alone (cancel flags it),
since LREM would scan the list whole while Redis serves nobody else."""


class AdminOperations:
    """The operators' operations, through ``access``; ``settle`` is the protocol's
    (WorkflowOperations.settle), which a cancel leaves its task's many dependents to."""

    def __init__(self, access: RedisAccess, settle: Callable[[str], int],
                 forget_workflows: Callable[[Iterable[str]], int]) -> None:
        self.access = access
        self.keys = access.keys
        self.settle = settle
        self.forget_workflows = forget_workflows

    def window(self, key, kind, start, stop, fields, limit, task_ids=(), redis_client=None):
        """One page of tasks for a list screen in one round trip, nothing written: the ids of
        ``key[start:stop]`` (kind 'list': LRANGE; 'zset': ZREVRANGE with scores) or
        ``task_ids`` (kind 'ids'), and their ``fields``, values cut to ``limit`` bytes.
        Returns ``[(id, score or None, {field: value or None})]``, the dict None for a task
        key that is not a hash (a key of the wrong type reads as empty). ``redis_client``
        reads through another client of the same server (e.g. one decoding leniently)."""
        reply = self.access.script("window")(
            keys=[key or self.keys.queues],
            args=[kind, start, stop, self.access.task_prefix, limit, len(fields), *fields,
                  *task_ids],
            client=redis_client)
        width = 3 + len(fields)
        rows = []
        for index in range(0, len(reply), width):
            values = reply[index + 3:index + width]
            rows.append((reply[index], reply[index + 1],
                         dict(zip(fields, values, strict=True)) if reply[index + 2] else None))
        return rows

    def peek(self, task_id, texts, others, text_limit, other_limit, most_others,
             redis_client=None):
        """A task hash for its page, bounded whatever is stored (see peek.lua): the fields
        ``texts`` with values cut to ``text_limit`` bytes, ``others`` and at most
        ``most_others`` more fields cut to ``other_limit``. Returns None for no task, a str
        (the key's type) for a key that is not a hash, else ``(number of fields,
        {field: (value, full length in bytes)})``."""
        reply = self.access.script("peek")(
            keys=[self.keys.task(task_id)],
            args=[text_limit, other_limit, len(texts), most_others, *texts, *others],
            client=redis_client)
        if reply is None or len(reply) == 1:
            return reply[0] if reply else None
        return reply[0], {reply[index]: (reply[index + 1], reply[index + 2])
                          for index in range(1, len(reply), 3)}

    def run_now(self, queue, task_id):
        """Send a scheduled task to its queue before its eta, to be taken next."""
        return bool(self.access.script("run_now")(
            keys=[self.keys.task(task_id), self.keys.scheduled(queue), *self.keys.waiting(queue)],
            args=[task_id, encode_time(now())]))

    def bulk_start(self, job_id, action, queue, state, user, keep, with_cancelled=False):
        """Begin retrying ('retry') or deleting ('delete') every task of a finished list, or
        cancelling ('cancel') every pending task, in batches (bulk.BULK_ACTIONS); False if
        that job is already running. ``keep``: seconds its record stays once it ended. A
        retry leaves cancelled tasks alone unless ``with_cancelled``."""
        if (action, state) not in BULK_ACTIONS:
            raise ValueError(f"no bulk action {action!r} on {state!r} tasks")
        return bool(self.access.script("bulk_start")(
            keys=[self.keys.bulk_job(job_id), self.keys.bulk_list(queue, state),
                  self.keys.bulk_running(queue), self.keys.prioritized(queue),
                  self.keys.held(queue)],
            args=[action, queue, state, user, encode_time(now()), int(keep), job_id,
                  "1" if with_cancelled else "0"]))

    def running_bulk_jobs(self):
        """The ids of the running bulk jobs (those started since the index existed)."""
        indexes = self.access.indexes(self.keys.bulk_running)
        running: set[str] = set()
        for reply in self.access.each_key(indexes, lambda client, index: client.smembers(index)):
            if isinstance(reply, Exception):
                raise reply
            running |= reply or set()
        return running

    def bulk_step(self, job_id, queue, state, batch, keep):
        """Run one batch of a bulk job; returns ``(status, processed, total, affected)``
        (status None when there is no such job). A delete takes the records of the workflows
        whose last tasks it deleted."""
        status, processed, total, affected, *workflows = self.access.script("bulk_step")(
            keys=[self.keys.bulk_job(job_id), self.keys.bulk_list(queue, state),
                  self.keys.pending(queue), self.keys.bulk_running(queue),
                  *self.keys.waiting(queue)[1:], self.keys.error_types(queue),
                  self.keys.failed(queue), self.keys.unique(queue)],
            args=[self.access.task_prefix, encode_time(now()), int(batch), int(keep), job_id,
                  self.keys.failed_of_type(queue, ""), self.access.dependency_templates])
        if workflows:
            self.forget_workflows(workflows[0])
        return status, processed, total, affected

    def bulk_stop(self, job_id, keep):
        """Stop a running bulk job between two batches; False if it was not running."""
        return bool(self.access.script("bulk_stop")(
            keys=[self.keys.bulk_job(job_id), self.keys.bulk_running(job_id.split("_", 2)[2])],
            args=[encode_time(now()), int(keep), job_id]))

    # -- anyone ----------------------------------------------------------------------------

    def cancel(self, task_id: str) -> str | None:
        """Cancel a task wherever it is; see cancel.lua."""
        queue = cast("str | None", self.access.redis.hget(self.keys.task(task_id), "queue"))
        if queue is None:
            return None
        reply: str | None = self.access.script("cancel")(
            keys=[self.keys.task(task_id), self.keys.pending(queue), self.keys.scheduled(queue),
                  self.keys.failed(queue), self.keys.prioritized(queue), self.keys.unique(queue),
                  self.keys.error_types(queue), self.keys.held(queue)],
            args=[task_id, encode_time(now()), self.keys.cancels("", queue), UNLIST_WINDOW,
                  self.keys.failed_of_type(queue, ""), self.access.dependency_templates])
        if reply == "cancelled settling":  # more dependents than one script cancels
            self.settle(queue)
            return "cancelled"
        return reply

    def clear_checkpoint(self, task_id: str) -> bool:
        """Start over: forget a task's checkpoint, unless a run holds the task now."""
        return bool(self.access.script("clear_checkpoint")(
            keys=[self.keys.task(task_id)], args=[encode_time(now())]))

    def retry(self, queue: str, task_id: str) -> int:
        """Put a failed task back in its queue: 1, 0 (not failed) or -1 (left alone: further
        than UNLIST_WINDOW from both ends of its failed list)."""
        return self.access.script("retry")(
            keys=[self.keys.task(task_id), self.keys.failed(queue), *self.keys.waiting(queue),
                  self.keys.error_types(queue)],
            args=[task_id, encode_time(now()), UNLIST_WINDOW, self.keys.failed_of_type(queue, ""),
                  self.access.dependency_templates])

    def delete_finished(self, queue, task_id):
        """Delete a task if it is finished: 1, 0 (not finished) or -1 (left alone: further
        than UNLIST_WINDOW from both ends of its list). The record of a workflow whose last
        task it was goes too."""
        deleted, workflow = self.access.script("delete_finished")(
            keys=[self.keys.task(task_id), self.keys.complete(queue), self.keys.failed(queue),
                  self.keys.error_types(queue), self.keys.dependents(task_id)],
            args=[task_id, UNLIST_WINDOW, self.keys.failed_of_type(queue, "")])
        if workflow:
            self.forget_workflows([workflow])
        return int(deleted)

    def delete(self, queue: str, task_id: str, status: str | None) -> None:
        """MULTI; DEL task; LREM complete|failed 1 id; EXEC (finished tasks only), as blueque
        1.0 does; then what only this engine writes: the task's dependents set, and its
        workflow's record if it was the last task of it."""
        if status not in k.FINISHED:
            raise ValueError(f"Cannot delete task with status {status}")
        workflow = self._workflow_of(task_id)
        with self.access.redis.pipeline(transaction=True) as pipe:
            pipe.delete(self.keys.task(task_id))
            pipe.lrem(self.keys.finished(queue, status), 1, task_id)
            pipe.execute()
        self.access.redis.delete(self.keys.dependents(task_id))
        if workflow:
            self.forget_workflows([workflow])

    def _workflow_of(self, task_id: str) -> str | None:
        """The workflow a task belongs to (its hash's ``workflow``), if it is a hash."""
        try:
            return cast("str | None", self.access.redis.hget(self.keys.task(task_id),
                                                             "workflow"))
        except ResponseError:  # WRONGTYPE: the deletion says what is wrong
            return None
