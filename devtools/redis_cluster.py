"""A private Redis Cluster for the tests and bench/cluster.py: masters only (``redis-server``
processes from devtools/servers.py), whose slots can be moved live. redis-py is imported by the
methods that use it.
"""

import shutil
import subprocess

from devtools.servers import RedisServer, die_with_parent, free_port, wait_for

SLOTS = 16384


class LocalCluster:
    """A real Redis Cluster, masters only, joined by ``redis-cli --cluster create``;
    ``move_slot`` reshards one slot live, the way redis-cli does, so a test can watch clients
    ride through MOVED and ASK redirections. ``start()`` it, connect with
    ``RedisCluster.from_url(cluster.url)``, ``close()`` it."""

    def __init__(self, masters=3):
        self.nodes = [RedisServer() for _ in range(masters)]
        # Explicit bus ports: the default, port + 10000, is past 65535 for a free port above
        # 55535 (redis-server then exits at once), and may be taken by something else.
        self.bus_ports = [free_port() for _ in self.nodes]
        for node, bus_port in zip(self.nodes, self.bus_ports, strict=True):
            node.extra_args += ["--cluster-enabled", "yes", "--cluster-node-timeout", "2000",
                                "--cluster-config-file", f"nodes-{node.port}.conf",
                                "--cluster-port", str(bus_port)]
        self._clients = {}

    @property
    def url(self):
        return self.nodes[0].url

    @property
    def ports(self):
        return [node.port for node in self.nodes]

    def client(self, port):
        """A plain (non-cluster) client on one node, for the admin commands sent to it."""
        if port not in self._clients:
            import redis
            self._clients[port] = redis.Redis(port=port)
        return self._clients[port]

    def start(self):
        """Return self once every node is up, in cluster_state:ok, with the same slot table."""
        try:
            for node in self.nodes:
                node.start()
            cli = subprocess.Popen(
                [shutil.which("redis-cli") or "redis-cli", "--cluster", "create",
                 *(f"127.0.0.1:{port}" for port in self.ports),
                 "--cluster-replicas", "0", "--cluster-yes"],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=die_with_parent,
            )
            try:
                wait_for(lambda: cli.poll() is not None or self._introduce(), timeout=60,
                         interval=0.01, message="redis-cli to send its CLUSTER MEETs")
                output = cli.communicate(timeout=60)[0].decode(errors="replace")
            finally:
                cli.kill()
                cli.wait()
            if cli.returncode:
                raise RuntimeError(f"redis-cli --cluster create failed:\n{output}")
            wait_for(self._settled, timeout=20, message="the cluster to settle")
        except BaseException:
            self.close()
            raise
        return self

    def _introduce(self):
        """Once redis-cli has sent its CLUSTER MEETs (every node knows another), every node meets
        every other: gossip alone takes 1-5 s to spread them, and redis-cli polls once a second."""
        if any(int(self.client(port).cluster("INFO")["cluster_known_nodes"]) < 2
               for port in self.ports):
            return False
        for port in self.ports:
            known = self.client(port).execute_command("CLUSTER", "NODES").decode()
            for other, bus_port in zip(self.ports, self.bus_ports, strict=True):
                if f":{other}@" not in known:
                    self.client(port).execute_command("CLUSTER", "MEET", "127.0.0.1", other,
                                                      bus_port)
        return True

    def close(self):
        for client in self._clients.values():
            client.close()
        self._clients.clear()
        for node in self.nodes:
            node.close()

    def slot_table(self, port):
        """Node ``port``'s view: sorted (first slot, last slot, owner's port) ranges."""
        return sorted((first, last, int(owner[1]))
                      for first, last, owner, *_ in self.client(port).execute_command(
                          "CLUSTER", "SLOTS"))

    def _settled(self):
        """Every node says cluster_state:ok and has the same table, covering every slot."""
        tables = []
        for port in self.ports:
            if self.client(port).cluster("INFO").get("cluster_state") != "ok":
                return False
            tables.append(self.slot_table(port))
        covered = sum(last - first + 1 for first, last, _ in tables[0])
        return covered == SLOTS and all(table == tables[0] for table in tables)

    @staticmethod
    def slot_of(key):
        from redis.cluster import key_slot
        return key_slot(key.encode() if isinstance(key, str) else key)

    def owner_port(self, slot, port=None):
        """The port of the node owning ``slot``, as the node on ``port`` (the first) sees it."""
        for first, last, owner in self.slot_table(port or self.ports[0]):
            if first <= slot <= last:
                return owner
        return None

    def node_id(self, port):
        return self.client(port).execute_command("CLUSTER", "MYID").decode()

    def move_slot(self, slot, to_port, keys_per_step=100, between=None):
        """Reshard ``slot`` with its keys to the node on ``to_port`` while clients may use it;
        ``between()``, if given, runs before each batch of up to ``keys_per_step`` keys is
        moved, so a test can act mid-move; the last time, no key is left to move."""
        from_port = self.owner_port(slot)
        if from_port == to_port:
            return
        source, target = self.client(from_port), self.client(to_port)
        source_id, target_id = self.node_id(from_port), self.node_id(to_port)
        target.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
        source.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
        while True:
            if between:
                between()
            keys = source.execute_command("CLUSTER", "GETKEYSINSLOT", slot, keys_per_step)
            if not keys:
                break
            source.execute_command("MIGRATE", "127.0.0.1", to_port, "", 0, 5000, "KEYS", *keys)
        # The target first: it bumps its epoch, so its claim wins wherever gossip carries it.
        for port in [to_port, from_port, *(p for p in self.ports if p not in (to_port, from_port))]:
            self.client(port).execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
        wait_for(lambda: all(self.owner_port(slot, port) == to_port for port in self.ports),
                 timeout=20, message=f"every node to see slot {slot} on port {to_port}")
