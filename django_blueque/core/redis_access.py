"""How every part of the protocol reaches Redis: one client, one key prefix (keys.py), the Lua
scripts of lua/, and the indexes shared by every queue. The parts of the protocol (protocol.py
and its protocol_*.py) each hold the one RedisAccess of their Protocol; ClusterAccess
(cluster.py) and AcknowledgedAccess (connections.py) change how a script is run and a key
read, for all of them at once."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any, cast

import redis

from . import keys as k
from .timings import DEFAULT, Timings

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

    from redis.cluster import RedisCluster

logger = logging.getLogger("django_blueque.reaper")


def lua_source(folder: Traversable, name: str) -> str:
    """The text of script ``name`` of ``folder``, each ``--#include NAME`` line replaced by the
    file NAME beside it (Redis gives scripts no way to call one another's functions)."""
    return "\n".join(folder.joinpath(line.split()[1]).read_text()
                     if line.startswith("--#include ") else line
                     for line in folder.joinpath(name).read_text().splitlines())


class RedisAccess:
    """One Redis client under one key prefix, with the protocol's scripts."""

    CLUSTER = False
    """Keys in cluster mode (see keys.py)? ClusterAccess's are."""

    def __init__(self, redis_client: redis.Redis | RedisCluster,
                 prefix: str = k.DEFAULT_PREFIX, timings: Timings = DEFAULT) -> None:
        self.redis = redis_client
        self.timings = timings
        self.keys = k.Keys(prefix, cluster=self.CLUSTER)
        self.task_prefix = self.keys.task("")
        self.dependency_templates = self.keys.dependency_templates()
        # all read now, so a forked task process finds them ready (it runs EVALSHA at once)
        folder = resources.files(__package__).joinpath("lua")
        self._scripts = {
            path.name[:-4]: self.redis.register_script(lua_source(folder, path.name))
            for path in folder.iterdir() if path.name.endswith(".lua")}

    def script(self, name: str) -> Callable[..., Any]:
        """A Lua script of lua/, run by EVALSHA (and loaded by redis-py when Redis lacks it)."""
        return self._scripts[name]

    def forget_loaded_scripts(self) -> None:
        """Pipelines find the scripts loaded (redis-py loads them before each): nothing to
        forget here; see ClusterAccess."""

    def slot_groups(self, queues: Sequence[str]) -> list[list[str]]:
        """``queues`` in groups that one script call may cover: all together (one per queue
        in cluster mode, see ClusterAccess)."""
        return [list(queues)] if queues else []

    def each_key(self, keys: list[str], read: Callable[[Any, str], Any]) -> list[Any]:
        """``read(client, key)`` for each key, in order, a refused one as its ResponseError
        (ClusterAccess sends them in one pipeline)."""
        replies = []
        for key in keys:
            try:
                replies.append(read(self.redis, key))
            except redis.ResponseError as exc:
                replies.append(exc)
        return replies

    def indexes(self, index_of: Callable[[str], str]) -> list[str]:
        """An index shared by every queue, as the list of its keys: the one key, or in
        cluster mode one per queue of the queues set."""
        if not self.keys.cluster:
            return [index_of("")]
        return [index_of(queue) for queue in self.queue_window(0, 0)]

    def queue_window(self, start: int, size: int) -> list[str]:
        """``size`` names of the queues set from rank ``start`` (the sweep's window); every
        name from ``start`` with size 0."""
        return cast("list[str]", self.redis.zrange(self.keys.queues, start, start + size - 1))

    def broken_index(self, index: str, mend: bool) -> None:
        """Log an index that holds something else than a sorted set; with ``mend``, delete
        it."""
        kind = self.redis.type(index)
        if kind in ("zset", "none"):
            return  # mended meanwhile
        logger.error("index %s holds a %s, not a sorted set (not written by django_blueque)%s",
                     index, kind, ": deleted; the sweep builds it again" if mend else "")
        if mend:
            self.redis.delete(index)
