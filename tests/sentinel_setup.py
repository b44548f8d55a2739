"""A real Sentinel set-up for the tests: a primary, a replica and three sentinels
(``redis-server --sentinel``, quorum 2), all on loopback ports, with timers short enough that a
failover takes seconds."""

import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import redis

from tests.redis_server import RedisServer, _die_with_parent, free_port
from tests.waiting import wait_for

SERVICE = "mymaster"
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 4000


class SentinelSetup:
    """``start()`` it, point ``BLUEQUE['SENTINELS']`` at ``sentinels``, then ``failover()`` or
    ``kill_primary()``; ``close()`` stops everything."""

    def __init__(self, sentinel_count=3, quorum=2, primary_args=()):
        self.primary = RedisServer(extra_args=primary_args)
        self.replica = RedisServer()
        self.quorum = quorum
        self.sentinel_ports = [free_port() for _ in range(sentinel_count)]
        self.dir = Path(tempfile.mkdtemp(prefix="blueque-sentinel-"))
        self.processes = []

    @property
    def sentinels(self):
        return [("127.0.0.1", port) for port in self.sentinel_ports]

    def start(self):
        self.primary.start()
        self.replica.extra_args += ["--replicaof", "127.0.0.1", str(self.primary.port)]
        self.replica.start()
        for port in self.sentinel_ports:
            config = self.dir / f"sentinel-{port}.conf"
            config.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {self.dir}\n"
                f"sentinel monitor {SERVICE} 127.0.0.1 {self.primary.port} {self.quorum}\n"
                f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}\n")
            self.processes.append(subprocess.Popen(
                [shutil.which("redis-server"), str(config), "--sentinel"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                preexec_fn=_die_with_parent))
        wait_for(self._ready, timeout=30, message="sentinels seeing the replica and each other")
        return self

    def sentinel(self, index=0):
        return redis.Redis(port=self.sentinel_ports[index], decode_responses=True)

    def _ready(self):
        """Every sentinel knows the replica and the other sentinels: a failover can proceed."""
        for index in range(len(self.sentinel_ports)):
            client = self.sentinel(index)
            try:
                master = client.sentinel_master(SERVICE)
                if (master["num-slaves"] < 1 or master["num-other-sentinels"] <
                        len(self.sentinel_ports) - 1):
                    return False
                replicas = client.sentinel_slaves(SERVICE)
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
            return int(client.sentinel_get_master_addr_by_name(SERVICE)[1])
        finally:
            client.close()

    def servers(self):
        return {self.primary.port: self.primary, self.replica.port: self.replica}

    def current_primary(self):
        return self.servers()[self.master_port()]

    def failover(self, timeout=30):
        """``SENTINEL FAILOVER``; returns once the sentinels name the other server."""
        before = self.master_port()
        self.sentinel().execute_command("SENTINEL", "FAILOVER", SERVICE)
        wait_for(lambda: self.master_port() != before, timeout=timeout,
                 message="the sentinels to name a new primary")
        return self.master_port()

    def kill_primary(self, timeout=30):
        """SIGKILL the primary; returns once the sentinels name the replica."""
        before = self.master_port()
        server = self.servers()[before]
        server.process.send_signal(signal.SIGKILL)
        server.process.wait(10)
        server.process = None
        wait_for(lambda: self.master_port() != before, timeout=timeout,
                 message="the sentinels to promote the replica")
        return self.master_port()

    def close(self):
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
                process.wait(10)
        self.primary.close()
        self.replica.close()
        shutil.rmtree(self.dir, ignore_errors=True)
