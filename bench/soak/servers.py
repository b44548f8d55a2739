"""The soak's processes: redis-server with AOF (alone, or a primary, a replica and three
Sentinels), and the supervised ``manage.py`` commands, restarted when they exit. Every process
gets SIGTERM from the kernel if the harness dies (PR_SET_PDEATHSIG), so none outlives it."""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import redis

from devtools.redis_sentinel import sentinel_config
from devtools.servers import RedisServer, die_with_parent, free_port


def redis_server(workdir, name, args=(), sentinel=None):
    """One redis-server with AOF (``appendfsync always``), or a Sentinel, in ``workdir/name``,
    its output in server.log there, out of the terminal's process group."""
    return RedisServer(extra_args=args, name=name, persistent=True, sentinel=sentinel,
                       directory=Path(workdir) / name, log=True, new_session=True).start()


class RedisSetup:
    """A private Redis with AOF (``appendfsync always``), or with ``sentinel`` a primary, a
    replica and three Sentinels, all on loopback. ``primary()`` is the server writes go to now."""

    SERVICE = "soak"

    def __init__(self, workdir, sentinel=False):
        self.sentinel = sentinel
        self.closed_port = free_port()  # nothing listens there (see soak/settings.py)
        self.servers = [redis_server(workdir, "redis-0")]
        self.sentinels = []
        if sentinel:
            first = self.servers[0]
            self.servers.append(redis_server(
                workdir, "redis-1", ["--replicaof", "127.0.0.1", str(first.port)]))
            conf = sentinel_config(self.SERVICE, first.port, quorum=2, down_after_ms=30000,
                                   failover_ms=60000)
            self.sentinels = [redis_server(workdir, f"sentinel-{i}", sentinel=conf)
                              for i in range(3)]
            self._wait_replica_synced()

    def _wait_replica_synced(self, timeout=30.0):
        deadline = time.monotonic() + timeout
        replica = redis.Redis(port=self.servers[1].port, decode_responses=True)
        while replica.info("replication").get("master_link_status") != "up":
            if time.monotonic() > deadline:
                raise RuntimeError("the replica did not sync with the primary")
            time.sleep(0.1)
        replica.close()

    def env(self):
        """The soak settings' view of this Redis (see soak/settings.py)."""
        if self.sentinel:
            return {"SOAK_SENTINELS": ",".join(str(s.port) for s in self.sentinels),
                    "SOAK_SERVICE": self.SERVICE, "SOAK_CLOSED_PORT": str(self.closed_port)}
        return {"SOAK_REDIS_URL": f"redis://127.0.0.1:{self.servers[0].port}/0"}

    def primary(self):
        if not self.sentinel:
            return self.servers[0]
        for sentinel in self.sentinels:
            try:
                client = redis.Redis(port=sentinel.port, socket_timeout=2, decode_responses=True)
                _, port = client.sentinel_get_master_addr_by_name(self.SERVICE)
                client.close()
                return next(s for s in self.servers if s.port == int(port))
            except (redis.RedisError, TypeError, StopIteration):
                continue
        return self.servers[0]

    def admin(self, timeout=5.0):
        """A plain client on the primary, for the harness's own reads and faults."""
        return redis.Redis(port=self.primary().port, socket_timeout=timeout,
                           socket_connect_timeout=timeout, decode_responses=True)

    def close(self):
        for server in self.sentinels + self.servers:
            server.close()


class Supervised:
    """One ``manage.py`` command, restarted by the supervisor whenever it exits. An exit the
    fault injector did not announce (``expect_exit``) is recorded as unexpected, with the last
    lines of its log."""

    def __init__(self, name, argv, env, logdir, skew=0.0, stamp=False):
        self.name, self.argv, self.env, self.skew = name, argv, env, skew
        self.log_path = Path(logdir) / f"{name}.log"
        self.stamp = stamp  # prefix each line of its output with the time it was read
        self.proc = None
        self.runs = []  # [pid, started, exit seen] of each process start
        self.expected_exits = 0
        self.unexpected = []  # (time, exit status, last log lines)
        self.refused = 0  # exits at start-up because Redis did not answer (then restarted)
        self.lock = threading.Lock()

    @property
    def pid(self):
        return self.proc.pid

    def start(self):
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.argv, env=self.env, stdout=subprocess.PIPE if self.stamp else log,
                stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
            log.write(f"--- {time.time():.3f} started pid {self.proc.pid}\n".encode())
        self.runs.append([self.proc.pid, time.time(), None])
        if self.stamp:
            threading.Thread(target=self._copy_stamped, args=(self.proc.stdout,),
                             daemon=True).start()

    def _copy_stamped(self, output):
        with open(self.log_path, "ab", buffering=0) as log:
            for line in output:
                log.write(f"{time.time():.3f} ".encode() + line)

    def expect_exit(self):
        with self.lock:
            self.expected_exits += 1

    def unexpect_exit(self):
        """Take back an ``expect_exit`` whose signal found the process gone."""
        with self.lock:
            self.expected_exits = max(0, self.expected_exits - 1)

    def check(self):
        """Restart the process if it exited; returns True if it did."""
        if self.proc.poll() is None:
            return False
        status = self.proc.returncode
        self.runs[-1][2] = time.time()
        with self.lock:
            tail = self.tail()
            if self.expected_exits:
                self.expected_exits -= 1
            elif status and self._refused_to_start():
                self.refused += 1  # a command refuses to start on a Redis that is away
                time.sleep(0.5)
            else:
                self.unexpected.append((time.time(), status, tail))
        self.start()
        return True

    def _refused_to_start(self):
        """Whether this run's output (since its "started pid" line) says it refused to start
        for want of Redis. Not the last line alone: the task processes a killed listener left
        behind still write to the same log."""
        run = self.tail(40)
        marker = f"started pid {self.proc.pid}"
        since = max((n for n, line in enumerate(run) if marker in line), default=0)
        return any("CommandError: Redis does not answer" in line
                   for line in run[since:])

    def tail(self, lines=6):
        try:
            return self.log_path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return []

    def stop(self, grace=15.0):
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.terminate()
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        except ProcessLookupError:
            pass


def manage_argv(repo, *command):
    return [sys.executable, str(Path(repo) / "testproject" / "manage.py"), *command]


def descendants_of(pid):
    """Pids of the processes below ``pid`` (from /proc): a listener's task processes and its
    spare, their own children, and so on."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    found, above = [], {pid}
    while above:
        below = [child for child, parent in parents.items() if parent in above]
        found += below
        above = set(below)
    return found
