"""A private Sentinel set for the tests and the soak: a primary, a replica and three Sentinels
(``redis-server`` processes from devtools/servers.py), with timers short enough that a failover
takes seconds. redis-py is imported by the methods that use it.
"""

from devtools.servers import RedisServer, wait_for

SERVICE = "mymaster"


def sentinel_config(service, primary_port, quorum=2, down_after_ms=1000, failover_ms=4000):
    """The lines that make a Sentinel monitor ``service`` whose primary is on ``primary_port``."""
    return (f"sentinel monitor {service} 127.0.0.1 {primary_port} {quorum}\n"
            f"sentinel down-after-milliseconds {service} {down_after_ms}\n"
            f"sentinel failover-timeout {service} {failover_ms}\n")


class SentinelSetup:
    """A primary, a replica and ``sentinel_count`` Sentinels (quorum 2), with timers short
    enough that a failover takes seconds. ``start()`` it, point ``BLUEQUE['SENTINELS']`` at
    ``sentinels``, then ``failover()`` or ``kill_primary()``; ``close()`` stops everything."""

    def __init__(self, sentinel_count=3, quorum=2, primary_args=(), service=SERVICE,
                 down_after_ms=1000, failover_ms=4000, **server_options):
        self.service = service
        self.primary = RedisServer(extra_args=primary_args, name="primary", **server_options)
        self.replica = RedisServer(name="replica", **server_options)
        self.quorum = quorum
        self.timers = (down_after_ms, failover_ms)
        self.sentinel_servers = [RedisServer(name=f"sentinel-{i}", **server_options)
                                 for i in range(sentinel_count)]

    @property
    def sentinel_ports(self):
        return [server.port for server in self.sentinel_servers]

    @property
    def sentinels(self):
        return [("127.0.0.1", port) for port in self.sentinel_ports]

    def start(self, timeout=30):
        try:
            self.primary.start()
            self.replica.extra_args += ["--replicaof", "127.0.0.1", str(self.primary.port)]
            self.replica.start()
            for server in self.sentinel_servers:
                server.sentinel = sentinel_config(self.service, self.primary.port, self.quorum,
                                                  *self.timers)
                server.start()
            wait_for(self._ready, timeout=timeout,
                     message="sentinels seeing the replica and each other")
        except BaseException:
            self.close()
            raise
        return self

    def sentinel(self, index=0):
        import redis
        return redis.Redis(port=self.sentinel_ports[index], decode_responses=True)

    def _ready(self):
        """Every sentinel knows the replica and the other sentinels: a failover can proceed."""
        import redis
        for index in range(len(self.sentinel_ports)):
            client = self.sentinel(index)
            try:
                master = client.sentinel_master(self.service)
                if (master["num-slaves"] < 1 or master["num-other-sentinels"] <
                        len(self.sentinel_ports) - 1):
                    return False
                replicas = client.sentinel_slaves(self.service)
                if not replicas or any(r["is_sdown"] or r.get("master-link-status") != "ok"
                                       for r in replicas):
                    return False
            except redis.RedisError:
                return False
            finally:
                client.close()
        return True

    def master_port(self):
        """The primary's port as the first sentinel names it."""
        client = self.sentinel()
        try:
            return int(client.sentinel_get_master_addr_by_name(self.service)[1])
        finally:
            client.close()

    def servers(self):
        return {self.primary.port: self.primary, self.replica.port: self.replica}

    def current_primary(self):
        return self.servers()[self.master_port()]

    def failover(self, timeout=30):
        """``SENTINEL FAILOVER``; returns once the sentinels name the other server."""
        before = self.master_port()
        self.sentinel().execute_command("SENTINEL", "FAILOVER", self.service)
        wait_for(lambda: self.master_port() != before, timeout=timeout,
                 message="the sentinels to name a new primary")
        return self.master_port()

    def kill_primary(self, timeout=30):
        """SIGKILL the primary; returns once the sentinels name the replica."""
        before = self.master_port()
        self.servers()[before].kill()
        wait_for(lambda: self.master_port() != before, timeout=timeout,
                 message="the sentinels to promote the replica")
        return self.master_port()

    def close(self):
        for server in [*self.sentinel_servers, self.primary, self.replica]:
            server.close()
