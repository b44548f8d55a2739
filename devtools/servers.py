"""One private ``redis-server`` for the tests, the benchmarks, the soak and the demo (optionally
with an append-only file, or as a Sentinel), and the small helpers every private set-up uses:
a free loopback port, a PING, a poll until something is true. It runs from the real binary on a
free loopback port in a directory of its own, and gets SIGTERM from the kernel when the process
that started it dies, however it dies (``die_with_parent``). The sets of several servers are in
redis_sentinel.py (a primary, a replica and Sentinels) and redis_cluster.py (a Redis Cluster).

Only the standard library is imported: the demo imports this module before its virtualenv (and
so redis-py) exists.
"""

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PR_SET_PDEATHSIG = 1
RESERVED_PORTS = (6379, 26379)  # where someone's real Redis or Sentinel may live


def die_with_parent():
    """``preexec_fn``: in the child before exec, ask the kernel for SIGTERM when the parent
    dies, so no server outlives the tests, benchmark or demo that started it (Linux only)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def free_port(preferred=None):
    """A loopback port nothing listens on: ``preferred`` if it is free, else one the kernel
    picks (never Redis's or Sentinel's default port)."""
    if preferred:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", preferred))
                return preferred
            except OSError:
                pass
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in RESERVED_PORTS:
            return port


def answers(port):
    """True if a Redis (or Sentinel) on ``port`` answers PING (not while it loads its data)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def wait_for(predicate, timeout=20.0, message="condition", interval=0.05):
    """Poll predicate() until it returns something truthy, and return that; after ``timeout``
    seconds fail with ``message`` (a string, or a callable giving one, e.g. a process's log)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            detail = message() if callable(message) else message
            raise AssertionError(f"timed out after {timeout} s waiting for {detail}")
        time.sleep(interval)


class RedisServer:
    """A redis-server process that can be stopped, signalled and restarted on the same port
    and data. ``persistent``: an append-only file synced on every write, as production
    servers keep their data across a restart. ``sentinel``: the ``sentinel ...`` lines of a
    Sentinel's configuration (it then runs with ``--sentinel``). ``directory``: where its
    files go (default: a temporary directory, removed by ``close()``). ``log``: its output
    goes to ``<directory>/server.log`` instead of nowhere. ``new_session``: out of the
    terminal's process group, so Ctrl-C reaches only the harness that stops things in order."""

    def __init__(self, binary=None, extra_args=(), *, name="redis", persistent=False,
                 sentinel=None, directory=None, log=False, new_session=False):
        self.binary = binary or shutil.which("redis-server")
        if not self.binary:
            raise RuntimeError("redis-server not found on PATH; install Debian's redis-server")
        self.name = name
        self.extra_args = list(extra_args)
        self.persistent = persistent
        self.sentinel = sentinel
        self.log = log
        self.new_session = new_session
        self.port = free_port()
        self._own_dir = directory is None
        if directory is None:
            self.dir = tempfile.mkdtemp(prefix=f"blueque-{name}-")
        else:
            self.dir = str(directory)
            os.makedirs(self.dir, exist_ok=True)
        self.process = None
        self.started = False  # once it has run, it restarts on the same port

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self):
        return self.process.pid

    def argv(self):
        if self.sentinel is not None:
            config = Path(self.dir) / "sentinel.conf"
            config.write_text(f"port {self.port}\nbind 127.0.0.1\ndir {self.dir}\n"
                              + self.sentinel)
            return [self.binary, str(config), "--sentinel", *self.extra_args]
        keep = (["--appendonly", "yes", "--appendfsync", "always"] if self.persistent
                else ["--appendonly", "no"])
        return [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                *keep, "--dir", self.dir, "--daemonize", "no", "--loglevel", "warning",
                *self.extra_args]

    def start(self, timeout=20.0):
        """Start it; return self once it answers PING (with its data loaded). At its first
        start only, a server that exits at once is started again on another free port: the
        one picked may have been taken meanwhile (by another xdist worker's server)."""
        for attempt in range(1 if self.started else 3):
            if attempt:
                self.port = free_port()
            output = (open(Path(self.dir) / "server.log", "ab") if self.log
                      else subprocess.DEVNULL)
            try:
                self.process = subprocess.Popen(self.argv(), stdout=output, stderr=output,
                                                preexec_fn=die_with_parent,
                                                start_new_session=self.new_session)
            finally:
                if self.log:
                    output.close()  # the child has its own copy
            deadline = time.monotonic() + timeout
            while not answers(self.port) and self.process.poll() is None \
                    and time.monotonic() < deadline:
                time.sleep(0.02)
            if answers(self.port):
                self.started = True
                return self
            self.stop()
        raise RuntimeError(f"{self.name} on port {self.port} did not start")

    def signal(self, signum):
        os.kill(self.process.pid, signum)

    def kill(self):
        """SIGKILL, as a crash: nothing is written on the way out."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)
        self.process = None

    def stop(self):
        """SIGTERM (after SIGCONT, in case a fault stopped it); SIGKILL if it lingers."""
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def close(self):
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)


@contextlib.contextmanager
def private_redis(directory=None):
    """A throwaway redis-server (no persistence) for a benchmark; yields its URL. In its own
    session: Ctrl-C reaches the harness but not Redis, which must outlive the listeners the
    harness stops."""
    server = RedisServer(directory=directory, new_session=True).start()
    try:
        yield server.url
    finally:
        server.close()
