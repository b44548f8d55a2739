"""The operators' operations on the protocol (a part of Protocol, kept apart to keep modules
short): the admin's bounded reads of list pages and task hashes, and its writes that act on
one task or, in batches, on a whole list (bulk jobs, see bulk.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .bulk import BULK_ACTIONS
from .protocol_upkeep import encode_time, now

if TYPE_CHECKING:
    import redis
    from redis.cluster import RedisCluster

    from .keys import Keys


class AdminOperations:
    """Mixed into Protocol: uses its ``redis``, ``keys``, ``script`` and ``_task_prefix``."""

    if TYPE_CHECKING:  # Protocol's, declared for the type checker
        redis: redis.Redis | RedisCluster
        keys: Keys
        _task_prefix: str

        def script(self, name: str) -> Callable[..., Any]: ...

        def indexes(self, index_of: Callable[[str], str]) -> list[str]: ...

        def each_key(self, keys: list[str], read: Callable[[Any, str], Any]) -> list[Any]: ...

    def window(self, key, kind, start, stop, fields, limit, task_ids=(), redis_client=None):
        """One page of tasks for a list screen in one round trip, nothing written: the ids of
        ``key[start:stop]`` (kind 'list': LRANGE; 'zset': ZREVRANGE with scores) or
        ``task_ids`` (kind 'ids'), and their ``fields``, values cut to ``limit`` bytes.
        Returns ``[(id, score or None, {field: value or None})]``, the dict None for a task
        key that is not a hash (a key of the wrong type reads as empty). ``redis_client``
        reads through another client of the same server (e.g. one decoding leniently)."""
        reply = self.script("window")(
            keys=[key or self.keys.queues],
            args=[kind, start, stop, self._task_prefix, limit, len(fields), *fields, *task_ids],
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
        reply = self.script("peek")(
            keys=[self.keys.task(task_id)],
            args=[text_limit, other_limit, len(texts), most_others, *texts, *others],
            client=redis_client)
        if reply is None or len(reply) == 1:
            return reply[0] if reply else None
        return reply[0], {reply[index]: (reply[index + 1], reply[index + 2])
                          for index in range(1, len(reply), 3)}

    def run_now(self, queue, task_id):
        """Send a scheduled task to its queue before its eta, to be taken next."""
        return bool(self.script("run_now")(
            keys=[self.keys.task(task_id), self.keys.scheduled(queue), *self.keys.waiting(queue)],
            args=[task_id, encode_time(now())]))

    def bulk_start(self, job_id, action, queue, state, user, keep, with_cancelled=False):
        """Begin retrying ('retry') or deleting ('delete') every task of a finished list, or
        cancelling ('cancel') every pending task, in batches (bulk.BULK_ACTIONS); False if
        that job is already running. ``keep``: seconds its record stays once it ended. A
        retry leaves cancelled tasks alone unless ``with_cancelled``."""
        if (action, state) not in BULK_ACTIONS:
            raise ValueError(f"no bulk action {action!r} on {state!r} tasks")
        return bool(self.script("bulk_start")(
            keys=[self.keys.bulk_job(job_id), self.keys.bulk_list(queue, state),
                  self.keys.bulk_running(queue), self.keys.prioritized(queue)],
            args=[action, queue, state, user, encode_time(now()), int(keep), job_id,
                  "1" if with_cancelled else "0"]))

    def running_bulk_jobs(self):
        """The ids of the running bulk jobs (those started since the index existed)."""
        indexes = self.indexes(self.keys.bulk_running)
        running: set[str] = set()
        for reply in self.each_key(indexes, lambda client, index: client.smembers(index)):
            if isinstance(reply, Exception):
                raise reply
            running |= reply or set()
        return running

    def bulk_step(self, job_id, queue, state, batch, keep):
        """Run one batch of a bulk job; returns ``(status, processed, total, affected)``
        (status None when there is no such job)."""
        status, processed, total, affected = self.script("bulk_step")(
            keys=[self.keys.bulk_job(job_id), self.keys.bulk_list(queue, state),
                  self.keys.pending(queue), self.keys.bulk_running(queue),
                  *self.keys.waiting(queue)[1:], self.keys.error_types(queue),
                  self.keys.failed(queue), self.keys.unique(queue)],
            args=[self._task_prefix, encode_time(now()), int(batch), int(keep), job_id,
                  self.keys.failed_of_type(queue, "")])
        return status, processed, total, affected

    def bulk_stop(self, job_id, keep):
        """Stop a running bulk job between two batches; False if it was not running."""
        return bool(self.script("bulk_stop")(
            keys=[self.keys.bulk_job(job_id), self.keys.bulk_running(job_id.split("_", 2)[2])],
            args=[encode_time(now()), int(keep), job_id]))
