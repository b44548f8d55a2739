"""The rounds of bench/cluster.py on one set-up (one Redis, or the cluster): an enqueue round of
the producers, a drain of queued no-op tasks by listeners started for it, the idle pickup
latency through a pipe the task processes write marks to; and the stopping of every process a
round starts, task processes included.

Imported by cluster.py, which puts this checkout first on ``sys.path``.
"""

import json
import os
import random
import select
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import redis
from infra import child

from devtools.process_tree import descendants, kill_tree
from django_blueque.core import Client

BATCH = 1000  # tasks per enqueue_many call
HARNESS = Path(__file__).with_name("cluster.py")  # the child processes: cluster.py --role ...


class Setup:
    """One Redis or one cluster, the engine's client on it, and plain clients on each server."""

    def __init__(self, name, label, url, cluster, ports):
        self.name, self.label, self.url, self.cluster = name, label, url, cluster
        self.servers = [redis.Redis(port=port) for port in ports]
        self.client = Client(url, cluster=cluster)

    def flush(self):
        for server in self.servers:
            server.flushall()

    def cpu(self):
        return [info["used_cpu_sys"] + info["used_cpu_user"]
                for info in (server.info("cpu") for server in self.servers)]

    def argv(self, role, queues, *extra):
        return [sys.executable, str(HARNESS), "--role", role, "--url", self.url,
                "--queue-list", ",".join(queues), *(["--cluster-mode"] if self.cluster else []),
                *map(str, extra)]


def pick_queues(cluster, count):
    """`count` names spread evenly over the masters, each next one on a master owning fewest."""
    owned = {port: [] for port in cluster.ports}
    names, i = [], 0
    while len(names) < count:
        name, i = f"q{i:03d}", i + 1
        port = cluster.owner_port(cluster.slot_of("{" + name + "}"))
        if len(owned[port]) == min(map(len, owned.values())):
            owned[port].append(name)
            names.append(name)
    return names, owned


def redis_use(before, after, seconds, tasks):
    """Redis CPU seconds of each server, ms per 1,000 tasks of all, busiest one's % of a core."""
    used = [b - a for a, b in zip(before, after, strict=True)]
    return {"redis_cpu_s": used, "cpu": 1e6 * sum(used) / tasks,
            "busiest": 100 * max(used) / seconds}


def enqueue_round(setup, producers, mode, seconds):
    setup.flush()
    before, start = setup.cpu(), time.monotonic()
    for proc in producers:
        proc.stdin.write(f"{mode} {seconds}\n")
        proc.stdin.flush()
    replies = [json.loads(proc.stdout.readline() or "null") for proc in producers]
    after, wall = setup.cpu(), time.monotonic() - start
    if None in replies:
        raise RuntimeError(f"[{setup.name}] a producer exited")
    tasks = sum(r["tasks"] for r in replies)
    rate = sum(r["tasks"] / r["seconds"] for r in replies)
    return {"rate": rate, "tasks": tasks, **redis_use(before, after, wall, tasks)}


def group(queues, listeners):
    """The queues in `listeners` contiguous groups (in pick order, so each spans the masters)."""
    return [queues[n * len(queues) // listeners:(n + 1) * len(queues) // listeners]
            for n in range(listeners)]


def stop_all(procs, grace=5.0):
    """SIGTERM (a listener's graceful stop) to all at once, then SIGKILL what is left, trees."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(max(deadline - time.monotonic(), 0))
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid)
            proc.wait()


def kill_strays():
    """Last, SIGKILL and reap whatever is still under this process: it is a subreaper, so the
    task processes of a listener that died come back to it."""
    for pid in descendants(os.getpid()):
        kill_tree(pid)
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:  # not a child of ours: its parent, killed too, was
            pass


def start_listeners(stack, procs, setup, args, queues, workdir, marks_fd=None):
    """Start the set-up's listeners, one per queue group, appending them to procs."""
    for n, names in enumerate(group(queues, args.listeners)):
        extra = ["--concurrency", args.concurrency]
        if marks_fd is not None:
            extra += ["--marks-fd", marks_fd]
        path = workdir / f"{setup.name}-listener{n}.log"
        out = stack.enter_context(open(path, "a"))
        procs.append(stack.enter_context(child(
            setup.argv("listener", names, *extra), stdout=out, stderr=out,
            start_new_session=True, pass_fds=() if marks_fd is None else (marks_fd,))))


def counts(setup, queues):
    """(complete, failed) tasks of the queues, in one round trip per server."""
    with setup.client.redis.pipeline(transaction=False) as pipe:
        for name in queues:
            pipe.llen(setup.client.keys.complete(name))
            pipe.llen(setup.client.keys.failed(name))
        replies = pipe.execute()
    return sum(replies[0::2]), sum(replies[1::2])


def drain_round(setup, args, queues, n, workdir):
    """n no-op tasks queued evenly over the queues, then the listeners started; the rate is n
    over the time from the first task's start to the last one's end (their task hashes)."""
    setup.flush()
    ids = []
    for q, name in enumerate(queues):
        share = n // len(queues) + (q < n % len(queues))
        for first in range(0, share, BATCH):
            ids += setup.client.get_queue(name).enqueue_many(["noop"] * min(BATCH, share - first))
    before, start = setup.cpu(), time.monotonic()
    with ExitStack() as stack:
        procs = []
        stack.callback(stop_all, procs)
        start_listeners(stack, procs, setup, args, queues, workdir)
        deadline = start + 60 + n / 20
        while (done := counts(setup, queues)) != (n, 0):
            if done[1] or time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError(f"[{setup.name}] drain of {n}: {done[0]} complete, {done[1]}"
                                   f" failed after {time.monotonic() - start:.0f} s")
            time.sleep(0.1)
        after, wall = setup.cpu(), time.monotonic() - start
    with setup.client.redis.pipeline(transaction=False) as pipe:
        for task_id in ids:
            pipe.hmget(setup.client.keys.task(task_id), ["started", "finished"])
        times = pipe.execute()
    first, last = min(float(s) for s, _ in times), max(float(f) for _, f in times)
    return {"rate": n / (last - first), "seconds": last - first, "wall": wall,
            **redis_use(before, after, wall, n)}


class Marks:
    """The read end of the pipe the task processes write their marks to, read a line at a time."""

    def __init__(self):
        self.fd, self.write_fd = os.pipe()
        self.buffer = b""

    def line(self, timeout):
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            if not select.select([self.fd], [], [], max(deadline - time.monotonic(), 0))[0]:
                raise RuntimeError(f"no task started within {timeout} s")
            chunk = os.read(self.fd, 65536)
            if not chunk:
                raise RuntimeError("every listener closed the marks pipe")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        name, started = line.decode().split()
        return name, float(started)


def pickup(setups, args, queues, samples, workdir):
    """Both set-ups' listeners idle at once; one task at a time, alternating set-ups and going
    round the queues: the time from the enqueue call to the task's code starting."""
    latencies = {setup.name: [] for setup in setups}
    with ExitStack() as stack:
        marks, procs = {}, []
        stack.callback(stop_all, procs)
        for setup in setups:
            marks[setup.name] = Marks()
            start_listeners(stack, procs, setup, args, queues, workdir,
                            marks[setup.name].write_fd)
            os.close(marks[setup.name].write_fd)
        for setup in setups:  # each listener through its first task, on every queue
            for name in queues:
                setup.client.get_queue(name).enqueue(f"mark-warm-{name}")
            for _ in queues:
                marks[setup.name].line(timeout=60)
        time.sleep(1)
        for i in range(samples):
            for setup in setups:
                time.sleep(0.1 + random.uniform(0, 0.1))
                expected = f"mark-{i}"
                sent = time.time()
                setup.client.get_queue(queues[i % len(queues)]).enqueue(expected)
                name, started = marks[setup.name].line(timeout=30)
                if name != expected:
                    raise RuntimeError(f"[{setup.name}] expected {expected}, got {name}")
                latencies[setup.name].append(1000 * (started - sent))
        for mark in marks.values():
            os.close(mark.fd)
    return latencies
