"""The Reader's base: one request's reads, each a pipeline whose failed replies read as empty.

Data someone else wrote may be of the wrong type: every read goes through ``Reader.read``,
which turns a failed reply into the empty value and notes the key in ``Reader.unreadable``,
so a page shows what it can and says what it could not read.
"""

import time

import redis

from ..core.task import Task
from ..core.values import finite_number

MAX_NAME = 512
"""Longest task id or queue name a page accepts; longer ones are a 404 (no key is that long)."""

PREVIEW_BYTES = 160

_EMPTY = {"llen": 0, "zcard": 0, "zcount": 0, "scard": 0, "smembers": set(), "zrange": [],
          "zrevrange": [], "zrevrangebyscore": [], "lindex": None, "hgetall": {}, "lrange": [],
          "hget": None, "zscore": None, "get": None, "sismember": 0, "pttl": -2, "exists": 0,
          "sscan": (0, []), "srandmember": []}


class ReaderBase:
    """The queries for one request, on the configured client: what every reader shares."""

    def __init__(self, client):
        self.client = client
        self.keys = client.keys
        self.db = client.redis  # decodes invalid UTF-8 as U+FFFD: a page never 500s on it
        self.now = time.time()
        self.unreadable = {}
        """{key: why}: keys whose type is not the protocol's, read as empty."""

    def read(self, calls):
        """Run ``calls`` ((command, key, *args) each) in one pipeline. A failed reply (a key
        of the wrong type) becomes the command's empty value and is noted in unreadable."""
        with self.db.pipeline(transaction=False) as pipe:
            for command, key, *args in calls:
                if command == "zrange":
                    pipe.zrange(key, *args, withscores=True)
                else:
                    getattr(pipe, command)(key, *args)
            replies = pipe.execute(raise_on_error=False)
        out = []
        for (command, key, *args), reply in zip(calls, replies, strict=True):
            if isinstance(reply, redis.ResponseError):
                self.unreadable.setdefault(key, str(reply).split(":")[-1].strip())
                reply = [None] * (len(args)) if command == "hmget" else _EMPTY[command]
            out.append(reply)
        return out

    def _window(self, key, kind, start, stop, fields, task_ids=()):
        """Protocol.admin.window as Task objects; a task key that is not a hash is noted. Tasks
        by id (kind 'ids') are read one call per queue in cluster mode, in their order."""
        if kind == "ids" and key is None and self.keys.cluster:
            slots = {}  # hash slot -> the ids whose task is there (a queue's, in cluster mode)
            for task_id in task_ids:
                slots.setdefault(self.db.keyslot(self.keys.task(task_id)), []).append(task_id)
            found = {task.id: task for ids in slots.values() for task in self._window(
                self.keys.task(ids[0]), kind, 0, 0, fields, ids)}  # the key routes the call
            return [found[task_id] for task_id in task_ids]
        tasks = []
        for task_id, score, values in self.client.protocol.admin.window(
                key, kind, start, stop, fields, PREVIEW_BYTES, task_ids, redis_client=self.db):
            if values is None:
                self.unreadable.setdefault(self.keys.task(task_id), "not a hash")
                values = {}
            task = Task(task_id, {name: value for name, value in values.items()
                                  if value is not None})
            task.score = finite_number(score)
            tasks.append(task)
        return tasks
