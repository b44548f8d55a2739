"""The listener's way of waiting for work without polling: per queue, a connection holding a
blocking peek on its pending list (``BLMOVE pending pending RIGHT RIGHT``, which returns as
soon as the list has an id and leaves it as it was), and one on its priority wake list (which
holds an element while tasks with a priority wait); the listener select()s on these
connections."""

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
    from .take_ahead import TakeAhead

BLOCK_SECONDS = 60
"""How long one blocking peek lasts before it is renewed (with the heartbeat, the only idle
command)."""

CONNECTION_ERRORS = (redis.ConnectionError, redis.TimeoutError)

ANSWER_GRACE = 10.0
"""Seconds past BLOCK_SECONDS after which a peek with no answer is counted as deaf (see deaf)."""

MOVING_PAUSE = 0.05
"""Seconds a peek waits before it is armed again on a slot that is moving (cluster mode)."""


def pool_of(redis_client: redis.Redis | RedisCluster) -> Callable[[str], Any]:
    """``key -> the connection pool of the server that holds it``."""
    if isinstance(redis_client, RedisCluster):
        return lambda key: redis_client.get_node_from_key(key).redis_connection.connection_pool
    return lambda key: redis_client.connection_pool


class Peek:
    """A connection holding a blocking peek on one list, and maybe a command sent right behind
    it (``behind``, a TakeAhead: Redis runs it the moment the peek returns)."""

    def __init__(self, pool_of, key):
        self._pool_of = pool_of  # key -> the pool of the server holding it, asked afresh
        self._pool = None
        self.key = key
        self.conn = None
        self.armed = False
        self.due = 0.0  # when Redis should have answered, at the latest (monotonic)
        self.behind: TakeAhead | None = None  # sent behind the peek, until its reply is read
        self._id = None  # (socket, the connection's CLIENT ID), for unblock()

    def arm(self, behind: TakeAhead | None = None) -> None:
        if self.armed:
            return
        if self.conn is None:
            # taken from the pool (connected as the pool connects: through Sentinel, say),
            # and held until closed, so that the pool can cut it when the primary moves
            self._pool = self._pool_of(self.key)
            self.conn = self._pool.get_connection()
        peek = ("BLMOVE", self.key, self.key, "RIGHT", "RIGHT", BLOCK_SECONDS)
        if behind is not None and not self._identify():
            behind = None  # CLIENT ID refused (an ACL): no unblocking, so nothing behind
        if behind is None:
            self.conn.send_command(*peek)
        else:
            self.behind = behind
            try:
                self.conn.send_packed_command(self.conn.pack_commands([peek, behind.command]))
            except CONNECTION_ERRORS:
                self.close()  # the command behind may have been sent: behind.lost()
                raise
        self.armed = True
        self.due = time.monotonic() + BLOCK_SECONDS + ANSWER_GRACE

    def _identify(self) -> bool:
        """Whether the connection's CLIENT ID is known (asked once it is connected, again)."""
        self.conn.connect()  # a no-op when connected
        if self._id is None or self._id[0] is not self.conn._sock:
            self.conn.send_command("CLIENT", "ID")
            try:
                self._id = (self.conn._sock, self.conn.read_response())
            except redis.ResponseError:
                self._id = (self.conn._sock, None)
        return self._id[1] is not None

    def fileno(self):
        # redis-py keeps the socket here; select() needs its descriptor.
        return self.conn._sock.fileno()

    def settle(self):
        """Read the peek's reply, then that of the command behind it (whatever the peek's
        was: Redis ran it). An element (its value is not needed: it stays in the list)
        leaves the peek unarmed, for the listener to take the task; a timeout (nothing came
        for BLOCK_SECONDS) arms it again at once, with no look at the empty queue, unless the
        command behind found something."""
        self.armed = False
        behind = self.behind
        try:
            reply = self._reply()
            if behind is not None:
                behind.answered(self._reply())
                self.behind = None
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
        if reply is None and (behind is None or behind.reply is None):
            self.arm()

    def _reply(self):
        try:
            return self.conn.read_response()
        except redis.ResponseError as exc:
            return exc

    def unblock(self, redis_client: Any, wait: float) -> None:
        """End a peek with a command behind it now, as if it had timed out (CLIENT UNBLOCK,
        sent with ``redis_client``), and settle it: the command behind runs and answers. When
        Redis does not, within ``wait`` seconds, the peek is closed (its command lost)."""
        if not self.armed or self.behind is None:
            return
        try:
            redis_client.client_unblock(self._id[1])
            if select.select([self], [], [], wait)[0]:
                self.settle()
        except redis.RedisError:
            pass
        if self.behind is not None:
            self.close()

    def close(self) -> None:
        if self.behind is not None:
            self.behind.lost()  # Redis may run it, or may have: its reply is lost
            self.behind = None
        if self.conn is not None:
            self.conn.disconnect()
            self._pool.release(self.conn)
        self.conn = None
        self._id = None
        self.armed = False


def deaf(peeks: list[Peek], current: float) -> bool:
    """Whether some of these armed ``peeks`` got no answer long after Redis should have ended
    them, and have none waiting: their connection is dead or half-open (a proxy or a load
    balancer dropped it without a word), and the listener would wait on it for ever."""
    overdue = [peek for peek in peeks if current >= peek.due]
    return bool(overdue) and not select.select(overdue, [], [], 0)[0]


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
