"""A private redis-server for the tests: started from the real binary on a free port, in its own
temporary directory, so the suite never touches data it did not create."""

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import redis


def _die_with_parent():
    """In the child before exec: the kernel sends SIGTERM to redis-server when the test process
    dies, however it dies, so no server outlives its tests."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RedisServer:
    """A redis-server process that can be stopped and restarted on the same port."""

    def __init__(self, binary=None, extra_args=()):
        self.extra_args = list(extra_args)
        self.binary = binary or shutil.which("redis-server")
        if not self.binary:
            raise RuntimeError("redis-server not found on PATH; install Debian's redis-server")
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="blueque-redis-")
        self.process = None

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self):
        self.process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir, "--daemonize", "no", "--loglevel", "warning",
             *self.extra_args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent,
        )
        deadline = time.monotonic() + 10
        client = redis.Redis(port=self.port)
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError(f"redis-server on port {self.port} did not start")
                time.sleep(0.02)
        client.close()
        return self

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)
        self.process = None

    def close(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def external_url():
    """A Redis URL given by the environment (BLUEQUE_TEST_REDIS_URL); the tests flush its db."""
    return os.environ.get("BLUEQUE_TEST_REDIS_URL")
