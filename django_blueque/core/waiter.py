"""The listener's way of waiting for work without polling: per queue, a connection holding a
blocking peek on its pending list (``BLMOVE pending pending RIGHT RIGHT``, which returns as
soon as the list has an id and leaves it as it was), and one on its priority wake list (which
holds an element while tasks with a priority wait); the listener select()s on these
connections."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import redis
from redis.cluster import RedisCluster
from redis.exceptions import AskError, ClusterDownError, MovedError, TryAgainError

if TYPE_CHECKING:
    from .client import Client

BLOCK_SECONDS = 60
"""How long one blocking peek lasts before it is renewed (with the heartbeat, the only idle
command)."""

CONNECTION_ERRORS = (redis.ConnectionError, redis.TimeoutError)

MOVING_PAUSE = 0.05
"""Seconds a peek waits before it is armed again on a slot that is moving (cluster mode)."""


def pool_of(redis_client: redis.Redis | RedisCluster) -> Callable[[str], Any]:
    """``key -> the connection pool of the server that holds it``."""
    if isinstance(redis_client, RedisCluster):
        return lambda key: redis_client.get_node_from_key(key).redis_connection.connection_pool
    return lambda key: redis_client.connection_pool


class Peek:
    """A connection holding a blocking peek on one list."""

    def __init__(self, pool_of, key):
        self._pool_of = pool_of  # key -> the pool of the server holding it, asked afresh
        self._pool = None
        self.key = key
        self.conn = None
        self.armed = False

    def arm(self):
        if self.armed:
            return
        if self.conn is None:
            # taken from the pool (connected as the pool connects: through Sentinel, say),
            # and held until closed, so that the pool can cut it when the primary moves
            self._pool = self._pool_of(self.key)
            self.conn = self._pool.get_connection()
        self.conn.send_command("BLMOVE", self.key, self.key, "RIGHT", "RIGHT", BLOCK_SECONDS)
        self.armed = True

    def fileno(self):
        # redis-py keeps the socket here; select() needs its descriptor.
        return self.conn._sock.fileno()

    def settle(self):
        """Read the peek's reply. An element (its value is not needed: it stays in the list)
        leaves the peek unarmed, for the listener to take the task; a timeout (nothing came
        for BLOCK_SECONDS) arms it again at once, with no look at the empty queue."""
        self.armed = False
        try:
            reply = self.conn.read_response()
        except CONNECTION_ERRORS:
            self.close()
            raise
        except (MovedError, AskError, TryAgainError, ClusterDownError) as exc:
            # cluster mode: its slot moved to another node, or is moving. The listener looks
            # at the queue through the cluster client, which follows the slot; the next arm
            # asks that client where the key is. While a slot moves (ASK: seconds), a pause
            # keeps the peek from spinning.
            self.close()
            if not isinstance(exc, MovedError):
                time.sleep(MOVING_PAUSE)
            return
        if reply is None:
            self.arm()

    def close(self):
        if self.conn is not None:
            self.conn.disconnect()
            self._pool.release(self.conn)
        self.conn = None
        self.armed = False


class PendingWaiter:
    """The peeks of one queue: armed (the queue was found empty and nothing came since) while
    both wait."""

    def __init__(self, client: Client, queue: str) -> None:
        self.peeks = [Peek(pool_of(client.redis), client.keys.pending(queue)),
                      Peek(pool_of(client.redis), client.keys.priority_wake(queue))]

    @property
    def armed(self) -> bool:
        return all(peek.armed for peek in self.peeks)

    def arm(self) -> None:
        for peek in self.peeks:
            peek.arm()

    def close(self) -> None:
        for peek in self.peeks:
            peek.close()
