"""The soak's processes: redis-server with AOF (alone, or a primary, a replica and three
Sentinels), and the supervised ``manage.py`` commands, restarted when they exit. Every process
gets SIGTERM from the kernel if the harness dies (PR_SET_PDEATHSIG), so none outlives it."""

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import redis

PR_SET_PDEATHSIG = 1


def _die_with_parent():
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def free_port():
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in (6379, 26379):  # never where someone's real Redis or Sentinel lives
            return port


def wait_for_ping(port, timeout=20.0, proc=None):
    client = redis.Redis(port=port, socket_timeout=2, socket_connect_timeout=2)
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                client.ping()
                return
            except redis.BusyLoadingError:
                pass  # loading its AOF: not ready yet
            except (redis.ConnectionError, redis.TimeoutError):
                if proc is not None and proc.poll() is not None:
                    raise RuntimeError(f"redis-server on port {port} exited") from None
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis-server on port {port} did not answer in {timeout} s")
            time.sleep(0.05)
    finally:
        client.close()


class RedisProcess:
    """One redis-server (or Sentinel) in its own directory, restartable on the same port and
    data, and signalled by the fault injector."""

    def __init__(self, workdir, name, args=(), sentinel_conf=None):
        self.binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        self.port = free_port()
        self.dir = Path(workdir) / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.args = list(args)
        self.sentinel_conf = sentinel_conf
        self.proc = None

    @property
    def pid(self):
        return self.proc.pid

    def argv(self):
        if self.sentinel_conf is not None:
            conf = self.dir / "sentinel.conf"
            conf.write_text(f"port {self.port}\nbind 127.0.0.1\ndir {self.dir}\n"
                            + self.sentinel_conf)
            return [self.binary, str(conf), "--sentinel"]
        return [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir",
                str(self.dir), "--save", "", "--appendonly", "yes", "--appendfsync", "always",
                "--daemonize", "no", *self.args]

    def start(self):
        log = open(self.dir / "server.log", "ab")  # the child keeps its own copy
        self.proc = subprocess.Popen(self.argv(), stdout=log, stderr=log,
                                     preexec_fn=_die_with_parent, start_new_session=True)
        log.close()
        wait_for_ping(self.port, proc=self.proc)
        return self

    def kill(self):
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def signal(self, signum):
        os.kill(self.proc.pid, signum)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class RedisSetup:
    """A private Redis with AOF (``appendfsync always``), or with ``sentinel`` a primary, a
    replica and three Sentinels, all on loopback. ``primary()`` is the server writes go to now."""

    SERVICE = "soak"

    def __init__(self, workdir, sentinel=False):
        self.sentinel = sentinel
        self.closed_port = free_port()  # nothing listens there (see soak/settings.py)
        self.servers = [RedisProcess(workdir, "redis-0").start()]
        self.sentinels = []
        if sentinel:
            first = self.servers[0]
            self.servers.append(RedisProcess(
                workdir, "redis-1", ["--replicaof", "127.0.0.1", str(first.port)]).start())
            conf = (f"sentinel monitor {self.SERVICE} 127.0.0.1 {first.port} 2\n"
                    f"sentinel down-after-milliseconds {self.SERVICE} 30000\n"
                    f"sentinel failover-timeout {self.SERVICE} 60000\n")
            self.sentinels = [RedisProcess(workdir, f"sentinel-{i}", sentinel_conf=conf).start()
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
            server.stop()


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
                stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
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
            elif status and tail and "Redis does not answer" in tail[-1]:
                self.refused += 1  # a command refuses to start on a Redis that is away
                time.sleep(0.5)
            else:
                self.unexpected.append((time.time(), status, tail))
        self.start()
        return True

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
    """Pids of the processes below ``pid`` (from /proc): a listener's children (its fork
    server, or task processes it forked itself), their children (the fork server's task
    processes), and so on."""
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


def waiting_for_its_task(pid):
    """True if the process's main thread sleeps in a read of a local socket: a spare task
    process waiting for its task (the kernel names the wait ``unix_stream_read_generic``)."""
    try:
        return "unix_stream_read" in Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return False
