"""Where every engine connection comes from, and how all of them follow a failover at once.

A primary that moved leaves connections behind on the old server, which keeps accepting writes
for seconds after Sentinel promoted its replica (until Sentinel reconfigures it): a process
acting there reserves and records what the new primary never sees, and tasks run twice. So:

- a READONLY reply (the server is a replica now), or a blocking command unblocked because its
  server became one, drops every connection of the pool, idle ones
  closed, busy ones (a blocking peek, a lease renewal in another thread) cut so that their
  command fails at once, and is raised as :class:`PrimaryMoved`, a ConnectionError, which
  every caller already retries; the next command connects afresh (through Sentinel, or to
  what a DNS name now resolves to);
- with Sentinel, the pool asks Sentinel for the primary's address at most every
  ``PRIMARY_CHECK_INTERVAL`` seconds, before handing out a connection, and drops every
  connection when it changed: a process acts on a demoted primary for about that long at most;
  and every socket a connection opens goes where Sentinel names the primary at that moment,
  never to the last address nor to ``OPTIONS`` host and port (see :class:`_AsksSentinel`).
"""

import logging
import os
import socket
import time
import weakref
from collections.abc import Sequence
from typing import Any

import redis
import redis.sentinel
from redis.cluster import ClusterNode, RedisCluster
from redis.connection import AbstractConnection
from redis.exceptions import ReadOnlyError, ResponseError

from .redis_access import RedisAccess
from .timings import DEFAULT, Timings

logger = logging.getLogger("django_blueque.engine")

PRIMARY_CHECK_INTERVAL = 1.0
"""Most seconds a Sentinel-managed process goes without asking Sentinel where the primary is
(one ``SENTINEL GET-MASTER-ADDR-BY-NAME``, only while the process sends commands)."""

DEMOTED_UNBLOCK = "UNBLOCKED force unblock from blocking operation, instance state changed"
"""The error a blocking command (the listener's peek) gets when its server becomes a replica."""

try:
    from redis.driver_info import DriverInfo
except ImportError:  # redis-py < 7 computes its driver name once, at import
    DriverInfo = None  # type: ignore[assignment, misc]  # tested for None below

_DRIVER_INFO = DriverInfo() if DriverInfo is not None else None


class PrimaryMoved(redis.ConnectionError):
    """The server answered as a replica, or Sentinel names another primary: every connection
    of the pool was dropped, and the next command reconnects to the primary."""


def engine_options() -> dict[str, Any]:
    """Connection options of every engine client: strings, not bytes, with invalid UTF-8
    from a foreign producer replaced rather than raised (it must never crash a listener or a
    page); and the driver name computed once, since redis-py 7+ otherwise looks its own
    version up for every new connection, which costs each forked task process milliseconds."""
    options = {"decode_responses": True, "encoding_errors": "replace"}
    if DriverInfo is not None:
        options["driver_info"] = _DRIVER_INFO
    return options


def for_task_process(redis_client: Any, seconds: float) -> None:
    """Set up every new connection of ``redis_client`` (a Redis or a RedisCluster) for a task
    process: give up on a reply after ``seconds``, so that a partition shows as an error its
    lease keeper counts, not as a call that never returns; and skip redis-py's two ``CLIENT
    SETINFO`` round trips (the library's name in ``CLIENT LIST``), which a process that lives
    for one task would pay on the way to its first command (the listener's own connections,
    which live long, keep them)."""
    nodes = getattr(redis_client, "get_nodes", None)
    pools = ([node.redis_connection.connection_pool for node in nodes() if node.redis_connection]
             if nodes else [redis_client.connection_pool])
    kwargs = [pool.connection_kwargs for pool in pools]
    manager = getattr(redis_client, "nodes_manager", None)
    if manager is not None:
        kwargs.append(manager.connection_kwargs)
    anonymous: dict[str, Any] = ({"driver_info": None} if DriverInfo is not None
                                 else {"lib_name": None, "lib_version": None})
    for options in kwargs:
        options["socket_timeout"] = options["socket_connect_timeout"] = seconds
        options.update(anonymous)


def drop_connections(pool):
    """Close the pool's idle connections and cut its busy ones (shut down, not closed: a
    ``select()`` on the socket wakes up, and its descriptor stays valid until its owner closes
    it). Connections inherited from a parent process are left to the parent."""
    pool.disconnect(inuse_connections=False)
    busy = getattr(pool, "_get_in_use_connections", None)
    for connection in busy() if busy else list(getattr(pool, "_in_use_connections", ())):
        sock = getattr(connection, "_sock", None)
        if sock is not None and getattr(connection, "pid", os.getpid()) == os.getpid():
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _FollowsPrimary(AbstractConnection):
    """Connection mixin: a READONLY reply drops the whole pool (see the module's docstring).
    A subclass of redis-py's AbstractConnection, so that in ``following(cls)`` it comes
    after ``cls`` and before the read_response it wraps."""

    pool_ref = None  # a weak reference to the pool, set when the pool makes the connection

    def read_response(self, *args, **kwargs):
        try:
            return super().read_response(*args, **kwargs)
        except ResponseError as exc:
            if not (isinstance(exc, ReadOnlyError) or str(exc).startswith(DEMOTED_UNBLOCK)):
                raise
            pool = self.pool_ref() if self.pool_ref else None
            logger.warning("Redis at %s answered as a replica: reconnecting every connection "
                           "to the primary", self._host_error())
            if pool is not None:
                if isinstance(pool, redis.sentinel.SentinelConnectionPool):
                    pool.proxy.reset()
                drop_connections(pool)
            self.disconnect()
            raise PrimaryMoved(f"{self._host_error()} is a replica now ({exc})") from None


_following_classes: dict[type, type] = {}


def following(connection_class):
    """``connection_class`` with the READONLY handling of :class:`_FollowsPrimary` (placed
    under any Sentinel class, whose own READONLY handling drops one connection only)."""
    if issubclass(connection_class, _FollowsPrimary):
        return connection_class
    if connection_class not in _following_classes:
        _following_classes[connection_class] = type(
            f"Following{connection_class.__name__}", (connection_class, _FollowsPrimary), {})
    return _following_classes[connection_class]


class _AsksSentinel(redis.sentinel.SentinelManagedConnection):
    """Sentinel connection mixin: every socket it opens is opened where Sentinel names the
    primary then. redis-py asks Sentinel only in ``connect()``, when the pool hands a
    connection out; a command sent on a connection that was cut meanwhile reconnects by
    itself (``send_packed_command``: e.g. the UNWATCH of a transaction whose WATCH lost its
    server, the scheduler's periodic claim in a failover), to the last address, a demoted
    primary, or to the address given in ``OPTIONS`` if it never connected."""

    def connect_to(self, address):
        """redis-py's ``connect()``, with the address Sentinel just gave."""
        self.host, self.port = address
        super().connect_check_health(check_health=self.connection_pool.check_connection,
                                     retry_socket_connect=False)

    def connect_check_health(self, check_health=True, retry_socket_connect=True):
        if not self._sock:
            self.connect()


class AsksSentinelConnection(_AsksSentinel):
    """The connection of a FollowingSentinelPool."""


class AsksSentinelSSLConnection(_AsksSentinel, redis.sentinel.SentinelManagedSSLConnection):
    """The connection of a FollowingSentinelPool over TLS."""


class _TracksConnections:
    """Pool mixin: connections know their pool, so a READONLY on one drops them all."""

    def make_connection(self):
        connection = super().make_connection()
        target = getattr(connection, "_conn", connection)  # redis-py's client-side cache proxy
        target.pool_ref = weakref.ref(self)
        return connection


class FollowingPool(_TracksConnections, redis.ConnectionPool):
    """A plain pool (URL, unix socket, TLS) whose connections follow a primary that moved."""


class FollowingBlockingPool(_TracksConnections, redis.BlockingConnectionPool):
    """FollowingPool for a user's BlockingConnectionPool (e.g. a django-redis cache's)."""


class FollowingSentinelPool(_TracksConnections, redis.sentinel.SentinelConnectionPool):
    """A Sentinel pool that also asks Sentinel, every ``PRIMARY_CHECK_INTERVAL`` seconds while
    in use, whether the primary moved, and then drops every connection (redis-py's own pool
    only notices on a READONLY or when it opens a new connection)."""

    def __init__(self, service_name, sentinel_manager, **kwargs):
        base = (AsksSentinelSSLConnection if kwargs.pop("ssl", False)
                else AsksSentinelConnection)
        kwargs["connection_class"] = following(kwargs.get("connection_class", base))
        super().__init__(service_name, sentinel_manager, **kwargs)
        self._next_check = 0.0

    def get_connection(self, *args, **kwargs):
        self._checkpid()
        self.check_primary()
        return super().get_connection(*args, **kwargs)

    def check_primary(self):
        """Ask Sentinel where the primary is (at most every PRIMARY_CHECK_INTERVAL seconds);
        drop every connection if it is not where they are."""
        current = time.monotonic()
        known = self.proxy.master_address
        if current < self._next_check or known is None:
            return  # no connection yet: the first one asks Sentinel anyway
        self._next_check = current + PRIMARY_CHECK_INTERVAL
        address = self.sentinel_manager.discover_master(self.service_name)
        if address != known:
            logger.warning("Sentinel names %s:%s as primary of %s (was %s:%s): reconnecting "
                           "every connection", *address, self.service_name, *known)
            self.proxy.master_address = address
            drop_connections(self)


class FollowingSentinel(redis.sentinel.Sentinel):
    """redis-py's Sentinel, asking ``SENTINEL GET-MASTER-ADDR-BY-NAME``: a short reply, and
    the new primary's address as soon as it accepted its promotion (``SENTINEL MASTERS``, what
    redis-py asks, names the old one until the switch is complete)."""

    def discover_master(self, service_name):
        errors = []
        for index, sentinel in enumerate(self.sentinels):
            try:
                address = sentinel.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME",
                                                   service_name)
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                errors.append(f"{sentinel}: {exc!r}")
                continue
            if address:
                self.sentinels[0], self.sentinels[index] = sentinel, self.sentinels[0]
                host = address[0].decode() if isinstance(address[0], bytes) else address[0]
                return host, int(address[1])
        raise redis.sentinel.MasterNotFoundError(
            f"No master found for {service_name!r}" + (f": {', '.join(errors)}" if errors else ""))


def sentinel_redis(sentinels: Sequence[Sequence[Any]], service_name: str,
                   sentinel_options: dict[str, Any] | None = None, **options: Any
                   ) -> redis.Redis:
    """An engine client on the primary Sentinel names, following its failovers."""
    manager = FollowingSentinel([tuple(s) for s in sentinels],
                                sentinel_kwargs=sentinel_options or None, **options)
    return redis.Redis(connection_pool=FollowingSentinelPool(
        service_name, manager, **{**options, **engine_options()}))


def url_redis(url: str, **options: Any) -> redis.Redis:
    """An engine client on a Redis URL, following a primary that moved behind its name."""
    pool = FollowingPool.from_url(url, **{**engine_options(), **options})
    pool.connection_class = following(pool.connection_class)
    return redis.Redis(connection_pool=pool)


_CLUSTER_OPTIONS = ("username", "password", "credential_provider", "client_name",
                    "socket_timeout", "socket_connect_timeout", "socket_keepalive",
                    "socket_keepalive_options", "retry_on_timeout", "max_connections",
                    "protocol")
"""What engine_twin copies of a RedisCluster's options (the rest is the cluster client's own
per-node wiring, which it refuses to be given)."""


def engine_twin(redis_client: redis.Redis | RedisCluster) -> redis.Redis | RedisCluster:
    """A client on the same server and options as ``redis_client`` with the engine's options
    and failover handling, and its own pool (the original's users, e.g. a cache, keep getting
    bytes)."""
    if isinstance(redis_client, RedisCluster):
        given = redis_client.nodes_manager.connection_kwargs
        return RedisCluster(startup_nodes=[
            ClusterNode(node.host, node.port) for node in redis_client.get_primaries()],
            **{name: value for name, value in given.items()
               if name in _CLUSTER_OPTIONS or name.startswith("ssl")}, **engine_options())
    pool = redis_client.connection_pool
    options = dict(pool.connection_kwargs, **engine_options())
    if isinstance(pool, redis.sentinel.SentinelConnectionPool):
        options.pop("connection_pool", None)
        options.pop("connection_class", None)
        # redis-py's Sentinel pool keeps ssl out of its options: it chose its connection class
        options["ssl"] = issubclass(pool.connection_class, redis.connection.SSLConnection)
        twin: redis.ConnectionPool = FollowingSentinelPool(
            pool.service_name, pool.sentinel_manager, **options)
    else:
        kind = (FollowingBlockingPool if isinstance(pool, redis.BlockingConnectionPool)
                else FollowingPool)
        twin = kind(connection_class=following(pool.connection_class),
                    max_connections=pool.max_connections, **options)
    return redis.Redis(connection_pool=twin)


class NotReplicated(redis.ConnectionError):
    """A task's start or end was written, but not acknowledged by enough replicas in time: the
    primary may have been replaced (a failover), or its replicas are behind. Retried, like a
    lost connection, by every caller."""


class AcknowledgedAccess(RedisAccess):
    """RedisAccess, with a task's start and end acknowledged by ``replicas`` replicas
    (``WAIT`` on the connection that wrote them) before a task runs or its end counts: a
    failover then cannot forget a start (the task would run twice) or a result (it would run
    again). Costs one WAIT round trip (to the replica) per start and per end."""

    ACKNOWLEDGED = ("start", "take", "finish")  # take: the runner's reserve and start

    def __init__(self, redis_client: redis.Redis, prefix: str, replicas: int,
                 timeout: float, timings: Timings = DEFAULT) -> None:
        super().__init__(redis_client, prefix, timings)
        self.replicas = int(replicas)
        self.timeout_ms = max(1, int(timeout * 1000))

    def script(self, name):
        script = super().script(name)
        if name not in self.ACKNOWLEDGED:
            return script

        def acknowledged(keys, args, client=None):
            if client is not None:
                return script(keys=keys, args=args, client=client)
            single = self.redis.client()  # one connection: WAIT counts its own writes
            try:
                reply = script(keys=keys, args=args, client=single)
                acked = single.execute_command("WAIT", self.replicas, self.timeout_ms)
            finally:
                single.close()
            if acked < self.replicas:
                raise NotReplicated(f"{name} acknowledged by {acked} of {self.replicas} "
                                    f"replica(s) within {self.timeout_ms} ms")
            return reply

        return acknowledged
