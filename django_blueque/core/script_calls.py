"""How the engine calls its Lua scripts: EVALSHA on a connection the process keeps.

redis-py's ``Redis.execute_command`` spends more client CPU around a command than the command's
round trip takes (on redis-py 8: a connection taken from the pool and given back, each time
recording metrics and polling the socket; an event dispatched; the arguments filtered): about
50 of the 95 us of one command on a 2-core machine. A task enqueued alone, and a listener's
take and each task's end, are one script call each, so that was half their cost. A script call
therefore goes, when it can, on a connection kept for it: taken from the pool once, used by one
thread at a time (a thread that finds it busy goes redis-py's usual way meanwhile), sent and
read under that connection's own retry policy as redis-py does, asking Sentinel first where the
primary is when the pool does that (connections.py), and taken afresh in a forked process.
A NOSCRIPT reply (Redis ran nothing) loads the script, which then goes redis-py's usual way.

Not kept from a blocking pool, where it would hold a place other commands wait for, nor from
a pool of fewer than SMALL_POOL connections, where it could be the one a thread lacks.
"""

from __future__ import annotations

import os
import select
import threading
from collections.abc import Sequence
from typing import Any

import redis
from redis.commands.core import Script
from redis.exceptions import NoScriptError

SMALL_POOL = 16
"""A pool allowing fewer connections keeps none for scripts (redis-py 8's default is 100
connections, redis-py 5's 2**31)."""


class KeptConnection:
    """A pool's connection kept for script calls, one thread at a time."""

    def __init__(self, redis_client: Any) -> None:
        pool = getattr(redis_client, "connection_pool", None)  # a RedisCluster has none
        self._pool: Any = pool
        self._usable = (pool is not None and not isinstance(pool, redis.BlockingConnectionPool)
                        and getattr(pool, "max_connections", 0) >= SMALL_POOL)
        self._check_primary = getattr(pool, "check_held", None)  # Sentinel's (connections.py)
        self._lock = threading.Lock()
        self._connection: Any = None

    def acquire(self) -> Any:
        """The connection, now this thread's until release(); None when another thread has
        it, or when it is not to be kept."""
        if not self._usable or not self._lock.acquire(blocking=False):
            return None
        try:
            connection = self._connection
            if connection is None or connection.pid != os.getpid():  # none yet, or the parent's
                connection = self._connection = self._pool.get_connection()
            else:
                if self._check_primary is not None:
                    self._check_primary(connection)  # may cut every connection
                _reconnect_if_stale(connection)
        except BaseException:
            self._lock.release()
            raise
        return connection

    def release(self) -> None:
        self._lock.release()


def _reconnect_if_stale(connection: Any) -> None:
    """The check redis-py's pool makes of each connection it hands out: connected (raising
    when Redis cannot be reached), and one with something to read while it was idle (the
    server closed it, e.g. on a restart; or a reply was left unread) connected afresh. Asked
    of the socket with one poll: redis-py's ``can_read()`` reads it with its timeout changed
    and restored, five system calls that cost a one-task enqueue 8-10 of its ~110 us. (A
    kept connection reads every reply it is sent, so its parser holds nothing in between.)"""
    connection.connect()  # a no-op when connected
    try:
        if not select.select([connection._sock], [], [], 0)[0]:
            return
    except (OSError, ValueError, TypeError):
        pass  # closed meanwhile: connected afresh below
    connection.disconnect()
    connection.connect()


def evalsha(connection: Any, script: Script, keys: Sequence[Any], args: Sequence[Any]) -> Any:
    """EVALSHA on ``connection``, retried as redis-py retries a command on it."""
    keys, args = keys or (), args or ()
    command = ("EVALSHA", script.sha, len(keys), *keys, *args)

    def send() -> Any:
        connection.connect()  # a no-op when connected; else, through Sentinel if it manages
        connection.send_command(*command)  # the connection (a send would reconnect as before)
        return connection.read_response()

    return connection.retry.call_with_retry(send, lambda _error: connection.disconnect())


class ScriptCall:
    """One of the engine's scripts, called as redis-py's Script is: ``(keys, args, client)``;
    on the kept connection unless a client (a pipeline, a connection of the caller's) is
    given."""

    __slots__ = ("script", "_kept")

    def __init__(self, script: Script, kept: KeptConnection) -> None:
        self.script = script
        self._kept = kept

    @property
    def sha(self) -> str:
        return self.script.sha

    def __call__(self, keys: Sequence[Any] = (), args: Sequence[Any] = (),
                 client: Any = None) -> Any:
        if client is None:
            connection = self._kept.acquire()
            if connection is not None:
                try:
                    return evalsha(connection, self.script, keys, args)
                except NoScriptError:  # Redis ran nothing: load it, redis-py's way runs it
                    self.script.sha = self.script.registered_client.script_load(
                        self.script.script)
                finally:
                    self._kept.release()
        return self.script(keys=keys, args=args, client=client)
