"""Redis Cluster: the client, and the protocol's scripts carried through a slot that moves.

In cluster mode every key of a queue is in one hash slot (see keys.py), so each step is one
script on the node that owns the slot; redis-py's RedisCluster sends it there and follows a
slot that moved (MOVED). While a slot moves (``redis-cli --cluster reshard``: its keys go
over in batches), a script on it can be refused: TRYAGAIN when only some of its declared keys
are still on the old node, or "non local key" when a key it reaches without declaring it
(a task hash, a lease) is not. Every script touches such keys before its first write
(common.lib's ``here``), so a refused script wrote nothing, and is simply run again until the
move is over (seconds per slot).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.exceptions import AskError, ClusterError, MovedError, NoScriptError, TryAgainError

from .connections import engine_options
from .keys import DEFAULT_PREFIX
from .protocol import Protocol
from .redis_access import RedisAccess
from .timings import DEFAULT, Timings

MOVING_SECONDS = 60.0
"""Most seconds a script is retried while its slot moves before the refusal is raised."""

_NON_LOCAL = "non local key"


def cluster_redis(url: str, **options: Any) -> RedisCluster:
    """An engine client on a Redis Cluster, from any node's URL: redis-py's RedisCluster,
    which follows slots that move (MOVED, ASK) and a failed-over primary by itself."""
    return RedisCluster.from_url(url, **{**options, **engine_options()})


def slot_moving(exc: Exception) -> bool:
    """A script refused, having written nothing, because its slot is moving."""
    if isinstance(exc, (TryAgainError, AskError, MovedError)):
        return True
    if isinstance(exc, ClusterError):  # redis-py's own retries of TRYAGAIN ran out
        return "TTL exhausted" in str(exc)
    return isinstance(exc, redis.ResponseError) and _NON_LOCAL in str(exc)


class ClusterAccess(RedisAccess):
    """RedisAccess on a RedisCluster, keys in cluster mode. A script refused while its slot
    moves is run again (pausing 10 ms, doubling up to 0.5 s) for up to MOVING_SECONDS."""

    CLUSTER = True

    def __init__(self, redis_client: RedisCluster, prefix: str = DEFAULT_PREFIX,
                 timings: Timings = DEFAULT) -> None:
        super().__init__(redis_client, prefix, timings)
        self.cluster = redis_client  # self.redis, typed as what it is here
        self._loaded: set[str] = set()  # scripts loaded on every primary for pipelines

    def script(self, name: str) -> Callable[..., Any]:
        script = self._scripts[name]  # a redis-py Script
        source = script.script

        def retried(keys: Any = None, args: Any = None, client: Any = None) -> Any:
            if client is not None:  # a pipeline, which its caller runs
                # redis-py refuses pipe.evalsha() in a cluster pipeline, where it could not
                # load a missing script: it is loaded here, on every primary, and a NOSCRIPT
                # reply is the caller's to handle (see each_key). The node is named: else
                # redis-py 8 asks a server for the keys of every EVALSHA (COMMAND GETKEYS).
                if name not in self._loaded:
                    self.redis.script_load(source)
                    self._loaded.add(name)
                keys, args = list(keys or ()), list(args or ())
                node = self.cluster.get_node_from_key(keys[0])  # type: ignore[no-untyped-call]
                return client.execute_command("EVALSHA", script.sha, len(keys), *keys, *args,
                                              target_nodes=node)
            deadline, pause = time.monotonic() + MOVING_SECONDS, 0.01
            while True:
                try:
                    return script(keys=keys, args=args)
                except (redis.ResponseError, ClusterError) as exc:
                    if not slot_moving(exc) or time.monotonic() + pause > deadline:
                        raise
                time.sleep(pause)
                pause = min(pause * 2, 0.5)

        return retried

    def each_key(self, keys: list[str], read: Callable[[Any, str], Any]) -> list[Any]:
        """RedisAccess.each_key in one pipeline: a round trip per node, not per key (a pass of
        the scheduler or the reaper reads every queue's index). A key whose slot is moving
        reads as None (empty) this time; a node that lost a script gets them all again."""
        for attempt in (1, 2):
            with self.redis.pipeline(transaction=False) as pipe:
                for key in keys:
                    read(pipe, key)
                replies = pipe.execute(raise_on_error=False)
            if attempt == 2 or not any(isinstance(reply, NoScriptError) for reply in replies):
                break
            self._loaded.clear()
        return [None if isinstance(reply, Exception) and slot_moving(reply) else reply
                for reply in replies]

    def forget_loaded_scripts(self) -> None:
        self._loaded.clear()

    def slot_groups(self, queues: Sequence[str]) -> list[list[str]]:
        """One queue per group: each has its own slot."""
        return [[queue] for queue in queues]


class ClusterProtocol(Protocol):
    """The protocol through a ClusterAccess: a queue's keys are in a slot of their own, which
    the queues set and a listener's info hash are not."""

    def __init__(self, access: ClusterAccess) -> None:
        super().__init__(access)
        self._registered: set[str] = set()  # queues this process has put in the queues set

    def register_queues(self, queues: Sequence[str], listened: bool = False) -> None:
        """Add the queues to the queues set, which the scripts cannot reach (it is in another
        slot), before anything of theirs is written, so that every reader finds them: once
        per process and queue, with score 0; with ``listened`` (a listener registered), with
        score 1, which the listeners page looks for (the count is in queues_in_slot)."""
        names = [queue for queue in queues if listened or queue not in self._registered]
        for queue in names:
            self.keys.check_queue(queue)
        if names:
            self.redis.zadd(self.keys.queues, dict.fromkeys(names, int(listened)),
                            gt=listened, nx=not listened)
            self._registered.update(names)

    def heartbeat(self, listener_id: str, queues: Sequence[str],
                  info: Mapping[str, object] | None = None, collect_cancels: bool = True,
                  ttl: float | None = None) -> tuple[bool, list[str], list[str]]:
        """Protocol.heartbeat, one script per queue; the info hash, in a slot of its own, is
        written after them."""
        beat = super().heartbeat(listener_id, queues, None, collect_cancels, ttl)
        if beat[0]:
            self.register_queues(queues, listened=True)
        if info:
            self.redis.hset(self.keys.listener_info(listener_id),
                            mapping={field: str(value) for field, value in info.items()})
        return beat
