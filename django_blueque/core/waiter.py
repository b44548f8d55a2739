"""The listener's way of waiting for work without polling: per queue, a connection holding a
blocking peek on its pending list (``BLMOVE pending pending RIGHT RIGHT``, which returns as
soon as the list has an id and leaves it as it was), and one on its priority wake list (which
holds an element while tasks with a priority wait); the listener waits on these connections
in its one ``poll()``."""

from __future__ import annotations

import select
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import redis
from redis.cluster import RedisCluster
from redis.exceptions import AskError, ClusterDownError, MovedError, TryAgainError

if TYPE_CHECKING:
    from .client import Client

CONNECTION_ERRORS = (redis.ConnectionError, redis.TimeoutError)

ANSWER_GRACE = 10.0
"""Seconds past the block's length (Timings.block) after which a peek with no answer is
counted as deaf (see deaf)."""

MOVING_PAUSE = 0.05
"""Seconds a peek waits before it is armed again on a slot that is moving (cluster mode)."""


def pool_of(redis_client: redis.Redis | RedisCluster) -> Callable[[str], Any]:
    """``key -> the connection pool of the server that holds it``."""
    if isinstance(redis_client, RedisCluster):
        return lambda key: redis_client.get_node_from_key(key).redis_connection.connection_pool
    return lambda key: redis_client.connection_pool


class Peek:
    """A connection holding a blocking peek on one list."""

    def __init__(self, pool_of, key, block, rearm=True):
        self._pool_of = pool_of  # key -> the pool of the server holding it, asked afresh
        self._pool = None
        self.key = key
        self.block = block
        self.rearm = rearm  # after a block with nothing: armed again (else left for a look)
        self.conn = None
        self.armed = False
        self.due = 0.0  # when Redis should have answered, at the latest (monotonic)

    def arm(self) -> None:
        if self.armed:
            return
        if self.conn is None:
            # taken from the pool (connected as the pool connects: through Sentinel, say),
            # and held until closed, so that the pool can cut it when the primary moves
            self._pool = self._pool_of(self.key)
            self.conn = self._pool.get_connection()
        self.conn.send_command("BLMOVE", self.key, self.key, "RIGHT", "RIGHT", int(self.block))
        self.armed = True
        self.due = time.monotonic() + self.block + ANSWER_GRACE

    def fileno(self):
        # redis-py keeps the socket here; the listener's poll() needs its descriptor.
        return self.conn._sock.fileno()

    def settle(self):
        """Read the peek's reply. An element (its value is not needed: it stays in the list)
        leaves the peek unarmed, for the listener to take the task; a timeout (nothing came
        for the block's length) arms it again at once, with no look at the empty queue
        (unless ``rearm`` is false)."""
        self.armed = False
        try:
            reply = self.conn.read_response()
        except redis.ResponseError as exc:
            reply = exc
        except CONNECTION_ERRORS:
            self.close()
            raise
        if isinstance(reply, (MovedError, AskError, TryAgainError, ClusterDownError)):
            # cluster mode: its slot moved to another node, or is moving. The listener looks
            # at the queue through the cluster client, which follows the slot; the next arm
            # asks that client where the key is. While a slot moves (ASK: seconds), a pause
            # keeps the peek from spinning.
            self.close()
            if not isinstance(reply, MovedError):
                time.sleep(MOVING_PAUSE)
            return
        if isinstance(reply, redis.ResponseError):
            raise reply
        if reply is None and self.rearm:
            self.arm()

    def close(self) -> None:
        if self.conn is not None:
            self.conn.disconnect()
            self._pool.release(self.conn)
        self.conn = None
        self.armed = False


def deaf(peeks: list[Peek], current: float) -> bool:
    """Whether some of these armed ``peeks`` got no answer long after Redis should have ended
    them, and have none waiting: their connection is dead or half-open (a proxy or a load
    balancer dropped it without a word), and the listener would wait on it for ever."""
    overdue = [peek for peek in peeks if current >= peek.due]
    return bool(overdue) and not select.select(overdue, [], [], 0)[0]


class PendingWaiter:
    """The peeks of one queue: armed (the queue was found empty and nothing came since) while
    both wait; or, while the queue runs its MAX_RUNNING (admission.py), the one peek on its
    slot wake list, which returns when a run there ends (or after a block, for another look:
    a run ended by blueque 1.0 wakes nobody)."""

    def __init__(self, client: Client, queue: str, block: float) -> None:
        self.peeks = [Peek(pool_of(client.redis), client.keys.pending(queue), block),
                      Peek(pool_of(client.redis), client.keys.priority_wake(queue), block)]
        self.slot = Peek(pool_of(client.redis), client.keys.slot_wake(queue), block,
                         rearm=False)

    @property
    def armed(self) -> bool:
        return self.slot.armed or all(peek.armed for peek in self.peeks)

    @property
    def armed_peeks(self) -> list[Peek]:
        return [peek for peek in (*self.peeks, self.slot) if peek.armed]

    def arm(self) -> None:
        for peek in self.peeks:
            peek.arm()

    def wait_for_slot(self) -> None:
        for peek in self.peeks:
            peek.close()
        self.slot.arm()

    def close(self) -> None:
        for peek in (*self.peeks, self.slot):
            peek.close()


class ListenedQueues:
    """The queues a listener takes from, each with its waiter: which to look at next (in
    turn, so that a busy queue does not starve the others), which wait armed (found empty,
    nothing came since), and which are set aside for a while because their keys hold data of
    the wrong type (the others go on)."""

    def __init__(self, client: Client, queues: list[str], block: float) -> None:
        self.names = queues
        self.waiters = {queue: PendingWaiter(client, queue, block) for queue in queues}
        self.set_aside_until: dict[str, float] = {}  # queue -> when to try it again
        self.rate_limited_until: dict[str, float] = {}  # queue -> when its window allows one
        self._turn = 0

    def to_look_at(self, current: float) -> list[str]:
        """The queues that may hold a task now, starting one further at each call."""
        for until_of in (self.set_aside_until, self.rate_limited_until):
            for queue, until in list(until_of.items()):
                if current >= until:
                    del until_of[queue]
        order = self.names[self._turn:] + self.names[:self._turn]
        self._turn = (self._turn + 1) % len(self.names)
        return [queue for queue in order if not self.waiters[queue].armed
                and queue not in self.set_aside_until and queue not in self.rate_limited_until]

    def arm(self, queue: str) -> None:
        self.waiters[queue].arm()

    def wait_for_slot(self, queue: str) -> None:
        """The queue runs its MAX_RUNNING: leave it until a run there ends."""
        self.waiters[queue].wait_for_slot()

    def wait_for_rate(self, queue: str, until: float) -> None:
        """The queue started its RATE_LIMIT's worth: leave it until its window allows one."""
        self.rate_limited_until[queue] = until
        self.waiters[queue].close()

    def set_aside(self, queue: str, until: float) -> bool:
        """Leave a queue alone until then; returns whether it was not set aside already."""
        first = queue not in self.set_aside_until
        self.set_aside_until[queue] = until
        self.waiters[queue].close()
        return first

    def armed_peeks(self) -> list[Peek]:
        return [peek for waiter in self.waiters.values() for peek in waiter.armed_peeks]

    def all_waiting(self) -> bool:
        """Burst mode's test: every queue found empty (or set aside) and nothing came since
        (a queue waiting for a slot still has tasks)."""
        return all((self.waiters[q].armed and not self.waiters[q].slot.armed)
                   or q in self.set_aside_until for q in self.names)

    def next_times(self) -> list[float]:
        return [*self.set_aside_until.values(), *self.rate_limited_until.values(),
                *(peek.due for peek in self.armed_peeks())]

    def close(self) -> None:
        for waiter in self.waiters.values():
            waiter.close()
